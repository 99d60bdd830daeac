"""The GPU catalog as users meet it: the names drivers print resolve to the right card and
memory, ambiguous names ask, near-miss names never cross, and `kvwise gpus` lists the keys."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest

from kvwise.cli import main
from kvwise.core.gpus import custom_gpu, detect_gpus, find_gpu, list_gpus, resolve_gpu
from kvwise.errors import InvalidFlagError, UnknownGpuError

# Driver strings as printed by nvidia-smi / NVML / torch.cuda.get_device_name / rocm-smi / lspci,
# with the card (key) and the memory (datasheet GB) they name. Where the string was copied from
# real output, the comment says where.
DRIVER_NAMES = [
    ("NVIDIA GeForce RTX 4090", "rtx4090", 24),  # vllm-project/vllm#18582 collect_env
    ("NVIDIA GeForce RTX 3090", "rtx3090", 24),
    ("NVIDIA GeForce RTX 5090", "rtx5090", 32),
    ("NVIDIA GeForce RTX 4060 Laptop GPU", "rtx4060-laptop", 8),
    ("NVIDIA GeForce RTX 4070 Laptop GPU", "rtx4070-laptop", 8),  # vllm-project/vllm#9293
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "rtx4090-laptop", 16),
    ("NVIDIA GeForce RTX 3080 Ti Laptop GPU", "rtx3080ti-laptop", 16),
    ("NVIDIA GeForce RTX 4070 SUPER", "rtx4070super", 12),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx4070tisuper", 16),
    ("NVIDIA GeForce RTX 3080 Ti", "rtx3080ti", 12),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti", 11),
    ("NVIDIA GeForce RTX 5070 Ti", "rtx5070ti", 16),
    ("NVIDIA RTX A6000", "rtx-a6000", 48),
    ("NVIDIA RTX A4000", "rtx-a4000", 16),
    ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada", 48),
    ("NVIDIA RTX 4000 Ada Generation", "rtx4000ada", 20),  # vllm-project/vllm#8255
    ("Quadro RTX 6000", "quadro-rtx6000", 24),
    ("Quadro RTX 8000", "quadro-rtx8000", 48),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtxpro6000-server", 96),  # vllm#40991
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtxpro6000", 96),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtxpro6000-maxq", 96),
    ("Tesla T4", "t4", 16),  # robbyant-research/MagicQuill#57 nvidia-smi
    ("Tesla V100-SXM2-32GB", "v100-32gb-sxm2", 32),
    ("Tesla V100-SXM2-16GB", "v100-16gb-sxm2", 16),
    ("Tesla V100-PCIE-16GB", "v100-16gb-pcie", 16),
    ("Tesla V100S-PCIE-32GB", "v100s", 32),  # vllm-project/vllm#10147
    # Pascal (compute capability 6.x): names as TensorFlow's device log and nvidia-smi print them
    # (public logs; newer drivers put "NVIDIA " before the GeForce names, paddle's test of
    # get_device_name on a P40 has "Tesla P40")
    ("Tesla P40", "p40", 24),
    ("Tesla P4", "p4", 8),
    ("Tesla P100-PCIE-16GB", "p100-16gb-pcie", 16),
    ("Tesla P100-PCIE-12GB", "p100-12gb-pcie", 12),
    ("Tesla P100-SXM2-16GB", "p100-16gb-sxm2", 16),
    ("NVIDIA TITAN Xp", "titan-xp", 12),
    ("TITAN Xp", "titan-xp", 12),
    ("NVIDIA GeForce GTX 1080 Ti", "gtx1080ti", 11),
    ("GeForce GTX 1080 Ti", "gtx1080ti", 11),
    ("NVIDIA GeForce GTX 1080", "gtx1080", 8),
    ("NVIDIA GeForce GTX 1070", "gtx1070", 8),
    ("NVIDIA GeForce GTX 1060 6GB", "gtx1060-6gb", 6),
    ("GeForce GTX 1060 3GB", "gtx1060-3gb", 3),
    ("NVIDIA A10", "a10", 24),
    ("NVIDIA A10G", "a10g", 24),
    ("NVIDIA A16", "a16", 16),
    ("NVIDIA A30", "a30", 24),
    ("NVIDIA A40", "a40", 48),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb-sxm", 40),  # vllm-project/vllm#18272
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm", 80),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb-pcie", 40),
    ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie", 80),
    ("NVIDIA A800-SXM4-80GB", "a800-80gb-sxm", 80),
    ("NVIDIA L4", "l4", 24),
    ("NVIDIA L20", "l20", 48),
    ("NVIDIA L40", "l40", 48),
    ("NVIDIA L40S", "l40s", 48),
    ("NVIDIA H20", "h20", 96),
    ("NVIDIA H800", "h800", 80),  # vllm-project/vllm#6737 collect_env
    ("NVIDIA H100 80GB HBM3", "h100-sxm", 80),  # vllm-project/vllm#55169 nvidia-smi
    ("NVIDIA H100 PCIe", "h100-pcie", 80),
    ("NVIDIA H100 NVL", "h100-nvl", 94),  # akash-network/provider-configs#91
    ("NVIDIA H200", "h200", 141),  # NVIDIA/mig-parted#120 nvidia-smi -q
    ("NVIDIA H200 NVL", "h200-nvl", 141),
    ("NVIDIA Corporation GH100 [H200 SXM 141GB]", "h200", 141),  # lspci, torchruntime#24
    ("NVIDIA GH200 480GB", "gh200-96gb", 96),  # vllm-project/vllm#9630
    ("NVIDIA GH200 144G HBM3e", "gh200-144gb", 144),  # vllm-project/vllm#18390
    ("NVIDIA B200", "b200", 180),
    ("NVIDIA B300 SXM6 AC", "b300", 288),
    ("NVIDIA GB200", "gb200", 186),
    ("NVIDIA GB10", "gb10", 128),  # unslothai/unsloth#10703 nvidia-smi
    ("AMD Instinct MI300X", "mi300x", 192),
    ("AMD Instinct MI300X (gfx942:sramecc+:xnack-)", "mi300x", 192),  # vllm-project/vllm#7951
    ("MI300X", "mi300x", 192),
    ("AMD Instinct MI300A", "mi300a", 128),
    ("AMD Instinct MI325X", "mi325x", 256),
    ("AMD Instinct MI355X", "mi355x", 288),
    ("AMD Instinct MI210", "mi210", 64),
    ("AMD Instinct MI250X/MI250 (gfx90a:sramecc+:xnack-)", "mi250x", 64),  # vllm#10663
    ("AMD Radeon PRO W7900", "w7900", 48),
    ("AMD Radeon RX 7900 XTX", "rx7900xtx", 24),
]


def _raw_catalog() -> dict[str, Any]:
    return dict(json.loads(resources.files("kvwise.core").joinpath("data/gpus.json").read_text()))


@pytest.mark.parametrize(("driver_name", "key", "memory_gb"), DRIVER_NAMES)
def test_driver_names_resolve_to_their_card_and_memory(
    driver_name: str, key: str, memory_gb: int
) -> None:
    gpu = find_gpu(driver_name)
    assert gpu.key == key
    # what CUDA/HIP reports is a little under the datasheet size (whose "GB" are GiB of chips),
    # never another size class
    assert 0.9 * memory_gb < gpu.memory_gib <= memory_gb


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("rtx4090", "rtx4090"),
        ("4090", "rtx4090"),
        ("4060 Ti 16GB", "rtx4060ti-16gb"),
        ("RTX 4060 Ti 16GB", "rtx4060ti-16gb"),
        ("rtx4060ti-8gb", "rtx4060ti-8gb"),
        ("RTX 3080 12GB", "rtx3080-12gb"),
        ("a100-80gb", "a100-80gb-sxm"),  # one memory size, two forms: the SXM part, named so
        ("A100 40GB", "a100-40gb-sxm"),
        ("a100-80gb-pcie", "a100-80gb-pcie"),
        ("H100-PCIe-80GB", "h100-pcie"),
        ("h100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("GH200 144GB", "gh200-144gb"),
        ("RTX 6000 Ada", "rtx6000ada"),
        ("A6000", "rtx-a6000"),
        ("DGX Spark", "gb10"),
        ("NVIDIA DGX Spark (GB10)", "gb10"),  # a pasted remark in parentheses
        ("7900 XTX", "rx7900xtx"),
        ("2x RTX 3090", "rtx3090"),  # a count of cards is not part of the name
        ("4xH100", "h100-sxm"),
        ("NVIDIA A100 80GB x2", "a100-80gb-sxm"),
        # nvidia-smi --query-gpu=name,memory.total: the measured total picks the variant
        ("NVIDIA GeForce RTX 4080, 16376 MiB", "rtx4080"),
        ("NVIDIA GeForce RTX 3060, 12288 MiB", "rtx3060-12gb"),
        ("NVIDIA GeForce RTX 4060 Ti, 8188 MiB", "rtx4060ti-8gb"),
        ("Tesla T4, 15360 MiB", "t4"),
        ("NVIDIA A100-PCIE-40GB, 40960 MiB", "a100-40gb-pcie"),
        ("V100 32GB", "v100-32gb-sxm2"),
        ("1080 Ti", "gtx1080ti"),  # a bare number no RTX card has: the GTX card
        ("1080", "gtx1080"),
        ("p40", "p40"),
        ("P100 12GB", "p100-12gb-pcie"),
        ("P100 16GB", "p100-16gb-sxm2"),  # one memory size, two forms: the SXM part, named so
        ("Tesla P40, 22919 MiB", "p40"),  # nvidia-smi with ECC on (the Tesla default)
        ("NVIDIA GeForce GTX 1060, 6144 MiB", "gtx1060-6gb"),
    ],
)
def test_what_users_type(typed: str, key: str) -> None:
    assert find_gpu(typed).key == key


@pytest.mark.parametrize(
    ("name", "choices"),
    [
        ("RTX 4060 Ti", {"rtx4060ti-8gb", "rtx4060ti-16gb"}),
        ("NVIDIA GeForce RTX 4060 Ti", {"rtx4060ti-8gb", "rtx4060ti-16gb"}),
        ("NVIDIA GeForce RTX 3060", {"rtx3060-8gb", "rtx3060-12gb"}),
        ("NVIDIA GeForce RTX 3080", {"rtx3080-10gb", "rtx3080-12gb"}),
        ("NVIDIA GeForce RTX 5060 Ti", {"rtx5060ti-8gb", "rtx5060ti-16gb"}),
        ("NVIDIA GeForce RTX 3080 Laptop GPU", {"rtx3080-laptop-8gb", "rtx3080-laptop-16gb"}),
        ("A100", {"a100-40gb-pcie", "a100-40gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm"}),
        ("V100", {"v100-16gb-sxm2", "v100-32gb-sxm2", "v100-16gb-pcie", "v100-32gb-pcie"}),
        ("GH200", {"gh200-96gb", "gh200-144gb"}),
        ("A800", {"a800-40gb-pcie", "a800-80gb-pcie", "a800-80gb-sxm"}),
        ("MI300", {"mi300x", "mi300a"}),
        ("gfx942", {"mi300x", "mi300a", "mi325x"}),
        ("RTX 6000", {"quadro-rtx6000", "rtx6000ada"}),
        ("A2000", {"rtx-a2000-6gb", "rtx-a2000-12gb"}),
    ],
)
def test_a_name_of_several_memory_sizes_asks_for_the_memory(name: str, choices: set[str]) -> None:
    with pytest.raises(UnknownGpuError) as raised:
        find_gpu(name)
    message = str(raised.value)
    assert "--gpu-memory-gib" in message and "\n" not in message
    listed = set(re.findall(r"([a-z0-9-]+) \(", message))
    assert listed == choices


@pytest.mark.parametrize(
    ("name", "not_key"),
    [
        ("RTX 4060 Ti 8GB", "rtx4060"),
        ("RTX 4060", "rtx4060ti-8gb"),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "rtx4060"),
        ("GH200 96GB", "h200"),
        ("NVIDIA GH200 480GB", "h200"),
        ("H200", "gh200-144gb"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-a6000"),
        ("NVIDIA RTX 6000 Ada Generation", "quadro-rtx6000"),
        ("NVIDIA RTX A6000", "rtx6000ada"),
        ("Quadro RTX 6000", "rtx6000ada"),
        ("NVIDIA GeForce RTX 3080 Ti", "rtx3080-12gb"),
        ("RTX 3080 12GB", "rtx3080ti"),
        ("NVIDIA GeForce RTX 4070 SUPER", "rtx4070"),
        ("NVIDIA GeForce RTX 4070", "rtx4070super"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx4070ti"),
        ("NVIDIA H100 NVL", "h100-sxm"),
        ("NVIDIA A10", "a10g"),
        ("NVIDIA A800-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a800-80gb-sxm"),
        ("NVIDIA L40", "l40s"),
    ],
)
def test_near_miss_names_never_cross(name: str, not_key: str) -> None:
    assert find_gpu(name).key != not_key


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce RTX 4090 D",
        "RTX 4050",
        "NVIDIA GeForce GTX 980 Ti",  # Maxwell (5.2): older than any card vLLM can run on
        "Arcturus GL-XL [AMD Instinct MI100]",
    ],
)
def test_an_unknown_card_is_refused_with_suggestions_only(name: str) -> None:
    with pytest.raises(UnknownGpuError, match=r"unknown GPU .*--gpu-memory-gib"):
        find_gpu(name)


def test_unknown_gpu_suggests_close_keys() -> None:
    with pytest.raises(UnknownGpuError, match="did you mean rtx4090"):
        find_gpu("rtx4091")


@pytest.mark.parametrize(
    ("name", "size"), [("RTX 4090 48GB", 48), ("NVIDIA H100 SXM5 64GB", 64), ("A100 96GB", 96)]
)
def test_a_memory_size_that_no_variant_has_is_refused(name: str, size: int) -> None:
    with pytest.raises(UnknownGpuError, match=f"no {size} GB card"):
        find_gpu(name)


def test_a_size_only_another_card_of_the_generation_has_lists_those_cards_and_picks_none() -> None:
    # "4x H100 96GB" (sgl-project/sglang#7059): no H100 is sold as 96 GB; the Hopper cards of
    # about that size are the H100 NVL (94 GB), the GH200 (96 GB) and the H20 (96 GB). The
    # message names them so the user can give the right --gpu; kvwise still picks none.
    with pytest.raises(UnknownGpuError) as raised:
        find_gpu("H100 96GB")
    message = str(raised.value)
    for key in ("h100-nvl", "gh200-96gb", "h20"):
        assert key in message
    assert "h200" not in message.replace("gh200", "")  # 141 GB: not about 96 GB
    assert "--gpu-memory-gib" in message  # a modded card of non-standard memory
    # a size no card of that generation has adds nothing
    with pytest.raises(UnknownGpuError) as raised:
        find_gpu("A100 96GB")
    assert "same generation" not in str(raised.value)


def test_gpu_memory_gib_picks_the_variant_and_sets_the_memory() -> None:
    gpu = resolve_gpu("A100", 79.0, detect=False)  # `--gpu A100 --gpu-memory-gib 79`
    assert (gpu.key, gpu.memory_gib) == ("a100-80gb-sxm", pytest.approx(79.0))
    assert gpu.bandwidth_bytes_s == find_gpu("a100-80gb-sxm").bandwidth_bytes_s
    small = resolve_gpu("RTX 4060 Ti", 15.5, detect=False)
    assert (small.key, small.memory_gib) == ("rtx4060ti-16gb", pytest.approx(15.5))
    assert resolve_gpu("rtx4090", 22.5, detect=False).memory_gib == pytest.approx(22.5)


def test_an_ambiguous_name_on_the_command_line_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a100-40gb-sxm" in err and "--gpu-memory-gib" in err


def test_every_entry_states_its_sources_and_sane_figures() -> None:
    raw = _raw_catalog()
    for entry in raw["gpus"]:
        assert entry["source"].startswith("https://"), entry["key"]
        assert entry["memory_source"], entry["key"]
        assert 0.85 * entry["memory_gb"] <= entry["memory_gib"] <= entry["memory_gb"], entry["key"]
        if entry["fp8_tflops"] is not None:
            assert entry["fp8_tflops"] >= entry["bf16_tflops"], entry["key"]
    assert len({e["key"] for e in raw["gpus"]}) == len(raw["gpus"])


def test_every_key_name_and_alias_resolves_to_its_own_entry() -> None:
    for entry in _raw_catalog()["gpus"]:
        for spelling in [entry["key"], entry["name"], *entry["aliases"]]:
            assert find_gpu(spelling).key == entry["key"], spelling


def test_gpus_listing_piped_at_60_columns_keeps_every_key_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 60
    for gpu in list_gpus():
        assert re.search(rf"(?<![\w-]){re.escape(gpu.key)}(?![\w-])", out), gpu.key


def test_gpus_json_lists_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_key = {row["key"]: row for row in rows}
    assert by_key["gh200-96gb"]["name"] == "GH200 96GB"
    assert by_key["rtx4090"]["memory_gib"] == 23.55


def test_custom_memory_size_and_validation() -> None:
    assert custom_gpu(11.0).memory_gib == pytest.approx(11.0)
    with pytest.raises(InvalidFlagError):
        custom_gpu(-1)


def test_amd_cards_run_bf16() -> None:
    assert find_gpu("MI300X").supports_bf16 and not find_gpu("T4").supports_bf16


def test_detection_without_nvml_or_driver_finds_nothing() -> None:
    # CI machines have no GPU: detection must return [] rather than fail
    assert detect_gpus() == []


@pytest.mark.parametrize(
    ("query", "keys"),
    [
        ("a100", {"a100-40gb-pcie", "a100-40gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm"}),
        ("4060 Ti", {"rtx4060ti-8gb", "rtx4060ti-16gb"}),
        ("NVIDIA H100 80GB HBM3", {"h100-sxm"}),
        ("gh200", {"gh200-96gb", "gh200-144gb"}),
        ("Tesla P40", {"p40"}),
        ("p100", {"p100-16gb-sxm2", "p100-16gb-pcie", "p100-12gb-pcie"}),
        ("GTX 1060", {"gtx1060-6gb", "gtx1060-3gb"}),
    ],
)
def test_gpus_query_shows_which_key_is_my_card(
    query: str, keys: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["gpus", query, "--json"]) == 0
    assert {row["key"] for row in json.loads(capsys.readouterr().out)} == keys


def test_gpus_query_for_no_card_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "GTX 980 Ti"]) == 2
    assert "unknown GPU" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA L40S 46GB", "l40s"),  # nvidia-smi's 46068 MiB, rounded by the user
        ("RTX 3080 12GB", "rtx3080-12gb"),
        ("RTX 3080 10GB", "rtx3080-10gb"),
        ("A100 80GB", "a100-80gb-sxm"),
    ],
)
def test_a_size_in_the_name_may_be_the_gib_a_tool_showed(name: str, key: str) -> None:
    assert find_gpu(name).name == find_gpu(key).name


def test_a_size_no_variant_is_near_is_refused_with_the_choices() -> None:
    with pytest.raises(UnknownGpuError, match="a100"):
        find_gpu("A100 60GB")


def test_pascal_cards_have_no_bf16_and_no_official_vllm_build() -> None:
    for key in ("p40", "p100-16gb-pcie", "gtx1080ti", "titan-xp"):
        gpu = find_gpu(key)
        assert not gpu.supports_bf16 and not gpu.has_official_vllm_build, key
    # the cards vLLM's wheels do build for keep their build: Volta, Turing, Ampere, AMD
    for key in ("v100-16gb-sxm2", "t4", "rtx3090", "mi300x"):
        assert find_gpu(key).has_official_vllm_build, key


def test_a_p40_plans_with_the_memory_cuda_reports_with_ecc_on() -> None:
    # 22.38 GiB is what TensorFlow's device log and a PyTorch OOM print on a P40 (nvidia-smi:
    # 22919 MiB); its marketed 24 GB is only there with ECC off (24451 MiB), which
    # --gpu-memory-gib sets
    assert find_gpu("Tesla P40").memory_gib == pytest.approx(22919 / 1024, abs=0.01)
    ecc_off = resolve_gpu("Tesla P40", 24451 / 1024)
    assert ecc_off.key == "p40" and ecc_off.memory_gib == pytest.approx(23.88, abs=0.01)


def test_pascal_geforce_16_bit_figure_is_not_the_crippled_native_fp16_rate() -> None:
    # compute capability 6.1 computes FP16 at 1/64 of FP32; vLLM's fp16 GEMMs run with fp32
    # compute, so the step-time figure is the FP32 rate, and the native rate is kept beside it
    for entry in _raw_catalog()["gpus"]:
        if entry["compute_capability"] == "6.1":
            assert entry["bf16_tflops"] == entry["fp32_tflops"], entry["key"]
            assert entry["fp16_native_tflops"] < entry["fp32_tflops"] / 32, entry["key"]
        if entry["compute_capability"] == "6.0":  # GP100: half2 at twice FP32
            assert entry["fp16_native_tflops"] == pytest.approx(2 * entry["fp32_tflops"], 0.01)


def test_gpus_lists_the_pascal_cards_with_their_architecture(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["gpus", "--json"]) == 0
    rows = {row["key"]: row for row in json.loads(capsys.readouterr().out)}
    for key in ("p40", "p4", "p100-16gb-pcie", "titan-xp", "gtx1080ti", "gtx1080", "gtx1070"):
        assert rows[key]["compute_capability"] in ("6.0", "6.1"), key
