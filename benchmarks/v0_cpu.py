"""V0's host CPU per running sequence per step, from the "vLLM V1" blog's published ratio.

    .venv/bin/python benchmarks/v0_cpu.py [--ratio 1.7] [--batch 256]

The blog (blog.vllm.ai/2025/01/27/v1-alpha-release.html, "Performance") reports V1 "up to 1.7x
higher throughput compared to V0 (without multi-step scheduling)" for Llama 3.1 8B on one
H100 with the ShareGPT dataset, kernels "almost identical", the difference "mainly due to the
architectural improvements (reduced CPU overheads)". "Up to" is the highest load of its
sweep, where V0 runs its full batch (max_num_seqs 256, V0's default) of decoding sequences.
If V0 adds c per sequence to each step that V1 takes S(256) for, 1.7 = (S + 256 c) / S:

    c = (ratio - 1) x S_V1(batch, context) / batch

S_V1 is the simulator's step time for Llama 3.1 8B on one H100 (the shipped coefficients), a
decode step of `batch` sequences at ShareGPT's mean context (202 prompt + 179 / 2 output
tokens: the means the vLLM 0.6.0 blog states for its ShareGPT sample). No validation
measurement is used. The result is `kvwise.sim.deploy.V0_SEQ_CPU_S`.
"""

from __future__ import annotations

import argparse
import sys

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim import deploy
from kvwise.sim.coefficients import coefficients_for
from kvwise.sim.steptime import step_weights

MODEL, GPU = "meta-llama/Llama-3.1-8B", "h100"
SHAREGPT_CONTEXT = 202 + 179 // 2  # mean prompt + half the mean output (vLLM 0.6.0 blog)


def v1_step_s(batch: int) -> float:
    gpu = find_gpu(GPU)
    dep = deploy.deployment(
        load_model(MODEL),
        gpu,
        VllmFlags(max_model_len=8192),
        vllm_version="0.8.0",
        vllm_use_v1=True,
        coefficients=coefficients_for(gpu, 1),
    )
    weights = step_weights(dep.config.cost, dep.config.coefficients)
    return weights.step_s(batch, 0, batch * SHAREGPT_CONTEXT, batch)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratio", type=float, default=1.7)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args(argv)
    step_s = v1_step_s(args.batch)
    cost = (args.ratio - 1) * step_s / args.batch
    print(f"V1 decode step, {args.batch} sequences: {step_s * 1e3:.2f} ms")
    print(f"V0 CPU per sequence per step for a {args.ratio}x gap: {cost * 1e6:.1f} us")
    print(f"shipped (kvwise.sim.deploy.V0_SEQ_CPU_S): {deploy.V0_SEQ_CPU_S * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
