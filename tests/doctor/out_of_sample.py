"""`kvwise doctor` scored on the out-of-sample start-up batches (tests/data/validation/unseen/).

The doctor's log reading (classify.py, parse.py, the SGLang reader) was never built on these
files: no record of them is named in src/kvwise/doctor or tests/doctor before this scoring, and
`git log -- src/kvwise/doctor` shows no change made from them. The planner that re-plans each fix
was changed after reading some a-d records and the misses of f (unseen/README.md lists them), so
the "re-planned to start" figure leans on a planner that has seen those records.

Each failure record is fed as a user pastes it: its `excerpt` and its `error_text`. Per record:
- cause: the doctor's kind is one `dataset_kinds.DATASET_KINDS` accepts for the record's kind;
- stage: the start-up stage the doctor names (the OOM's stage it placed, else the stage its kind
  is at, `planner.result.STAGE_OF_KIND`) equals the stage of the record's kind; a record whose
  kind names no stage (`cuda_oom`, `oom_reported_no_error_text`, SGLang's `cuda_oom`) is left
  out of the stage count, by name;
- fix: where the record states the change that made the user's start work (`WORKING_FIXES`,
  each quoted from the record's notes or its twin record): the doctor gave a fix; it moves one of
  the user's flags the user's way; the planner re-planned it and says it starts. The fix is read
  from the doctor run as a user runs it when the paste does not name everything:
  `kvwise doctor --model M --gpu G --vllm-version V` with the record's model, card and release
  (cause and stage are read from the paste alone).

Records left out, each named with why: no stated failure kind (the collector could not tell),
no excerpt and no error text to paste.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvwise.doctor import kinds
from kvwise.doctor.diagnose import diagnose
from kvwise.doctor.sglang_log import is_sglang_log
from kvwise.doctor.sglang_report import diagnose_sglang
from kvwise.doctor.text import read_log
from kvwise.planner.result import STAGE_OF_KIND
from tests.doctor.dataset_kinds import DATASET_KINDS
from tests.doctor.records import pasted
from tests.planner.accuracy import _hub_ids, _model_argument, _plain, emulated_hub

UNSEEN = Path(__file__).resolve().parents[1] / "data" / "validation" / "unseen"
VLLM_BATCHES = ("a", "b", "c", "d", "e", "f", "g")
SGLANG_BATCHES = ("unseen", "b", "c")

# SGLang records carry their kind in `outcome` (SGLang's words) -> the doctor's kinds
SGLANG_KINDS = {
    "not_enough_memory": frozenset({kinds.NO_KV_CACHE_MEMORY}),
    "cuda_oom": DATASET_KINDS["cuda_oom"] | {kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE},
}
SGLANG_STAGES = {"not_enough_memory": "kv_cache_allocation"}

UP, DOWN = "up", "down"


@dataclass(frozen=True)
class WorkingFix:
    """The change that made the user's start work, as the record states it."""

    flags: dict[str, Any]  # vLLM flag -> the user's direction (UP / DOWN) or value (True)
    quote: str  # where the record says so


# record id -> the user's working fix. Only changes of vLLM flags are listed; records whose
# working change is no flag are in NO_FLAG_FIXES, named, and left out of the fix count.
WORKING_FIXES: dict[str, WorkingFix] = {
    "a-recipes-12-qwen3-coder-480b-fp8-8xh20-dp8-gmu095-fail": WorkingFix(
        {"max_model_len": DOWN}, "the PR lowers max-model-len in the recipe"
    ),
    "a-qanything-289-qwen7b-rtx4090-4k-fail": WorkingFix(
        {"gpu_memory_utilization": UP}, "Fix reported: gmu 0.89 (QAnything passed about 0.33)"
    ),
    "a-vllm-6156-deepseek-coder-v2-lite-2xl40-tp2-163k-fail": WorkingFix(
        {"max_model_len": DOWN}, "The run with --max-model-len 30720 started"
    ),
    "a-vllm-15598-deepseek-r1-32xl40s-tp8-graph-oom": WorkingFix(
        {"enforce_eager": True}, "The user says it starts with --enforce-eager"
    ),
    "a-vllm-17431-qwen3-8b-a800-gmu04-v1-nocache": WorkingFix(
        {"VLLM_USE_V1": DOWN}, "same gmu 0.4, same GPU: V0 starts"
    ),
    "a-vllm-9445-llama32-11b-vision-a100-80g-oom": WorkingFix(
        {"max_num_seqs": DOWN, "enforce_eager": True}, "starts at max_num_seqs 32 + enforce_eager"
    ),
    "a-vllm-9630-llama32-11b-vision-h100-96g-len32-oom": WorkingFix(
        {"max_num_seqs": DOWN}, "a later commenter saying lowering --max-num-seqs fixes it"
    ),
    "a-vllm-10569-llama32-11b-vision-l20-profile-oom": WorkingFix(
        {"max_num_seqs": DOWN}, "Works with max_num_seqs=2"
    ),
    "b-recipes-pr831-qwen38-27b-fp8-rtxpro6000-maxseqs1024": WorkingFix(
        {"max_num_seqs": DOWN}, "The PR's fix lowers max_num_seqs"
    ),
    "b-recipes-pr831-qwen38-27b-nvfp4-rtxpro6000-maxseqs1024": WorkingFix(
        {"max_num_seqs": DOWN}, "The PR's fix lowers max_num_seqs"
    ),
    "b-recipes-pr831-qwen38-27b-bf16-rtxpro6000-maxseqs1024": WorkingFix(
        {"max_num_seqs": DOWN}, "The PR's fix lowers max_num_seqs"
    ),
    "b-spark388-qwen38-flash-next-nvfp4-gb10-gmu065-fail": WorkingFix(
        {"gpu_memory_utilization": UP}, "Same user/command as the 0.72 run (ok) except gmu"
    ),
    "c-vllm-17469-qwen3-30b-a3b-4xa10-v085-graph-oom": WorkingFix(
        {"enforce_eager": True}, "User: works with --enforce-eager"
    ),
    "c-vllm-7028-vistral-7b-awq-t4-gmu01-nokv": WorkingFix(
        {"gpu_memory_utilization": UP}, "Same user states gmu 0.9 (default) loads fine"
    ),
    "c-wildguard-pr2-mistral7b-ft-rtx3090-32k-fail": WorkingFix(
        {"max_model_len": DOWN}, "The fix sets max_model_len=30448"
    ),
    "c-xinference-2440-glm4-9b-chat-4090-128k-fail": WorkingFix(
        {"max_model_len": DOWN}, "it then started with max_model_len=53376"
    ),
    "d-phkv-llama31-8b-rtx3090-v028-47895-over-capacity-fail": WorkingFix(
        {"max_model_len": DOWN}, "twin d-phkv-...-41648-at-capacity (ok), only max_model_len"
    ),
    "d-phkv-llama31-8b-rtx3090-v028-95808-kvfp8-over-capacity-fail": WorkingFix(
        {"max_model_len": DOWN}, "twin d-phkv-...-8k-kvfp8-probe (ok), only max_model_len"
    ),
    "e-agentkv-qwen25-3b-rtx5080-wsl2-v026-32k-gmu092-fail": WorkingFix(
        {"gpu_memory_utilization": DOWN}, "twin ...-gmu085 (ok), only the utilization differs"
    ),
    "e-buccaneer-llama31-8b-rtx3090-v0171-gmu090-sampler-oom": WorkingFix(
        {"gpu_memory_utilization": DOWN}, "The authors then used 0.86 (twin ...-gmu086, ok)"
    ),
    "f-deutschshorts-qwen3-14b-awq-2x3080ti-tp2-v01011-8k-sampler-oom": WorkingFix(
        {"max_num_seqs": DOWN}, "twin of the mns16 start (ok): without --max-num-seqs 16 it dies"
    ),
    "f-rtx3050laptop-qwen25-3b-awq-v0110-wsl2-4k-gmu090-refused": WorkingFix(
        {"gpu_memory_utilization": DOWN}, "twin ...-gmu078 (ok), the same flags at 0.78"
    ),
}

# records that state a working change that is no vLLM flag (left out of the fix count)
NO_FLAG_FIXES = {
    "a-vllm-18107-qwen3-30b-a3b-gptq-rtx5090-load-oom": "another checkpoint (QwQ-32B-AWQ) started",
    "a-llamafactory-6476-qwen-14b-lora-v100s-4k-fail": "LLaMA-Factory's chat mode started",
    "b-vllm-23278-gpt-oss-120b-h100-negkv": "the smaller model (gpt-oss 20b) works",
    "c-qwen1-853-qwen-72b-chat-4xa100-40g-nokv": "an earlier vLLM install worked",
    "c-llmoptplat-mistral7b-v02-fp16-t4-2048-fail": "switching to the AWQ checkpoint ran",
}


@dataclass
class Scored:
    id: str
    wanted: str
    got: str
    cause_right: bool
    wanted_stage: str | None  # None: the record's kind names no stage
    got_stage: str | None
    fix: WorkingFix | None = None
    fix_given: bool = False
    fix_starts: bool = False  # the planner re-planned the doctor's fix and says it starts
    fix_same_way: bool = False  # it moves one of the user's flags the user's way
    fix_text: str = ""

    @property
    def stage_right(self) -> bool:
        return self.wanted_stage is not None and self.got_stage == self.wanted_stage

    @property
    def fix_right(self) -> bool:
        return self.fix_given and self.fix_starts and self.fix_same_way


@dataclass
class Batch:
    name: str
    scored: list[Scored] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (id, why)

    def figures(self) -> dict[str, int]:
        fixes = [s for s in self.scored if s.fix is not None]
        return {
            "records": len(self.scored),
            "cause": sum(s.cause_right for s in self.scored),
            "stage_scored": sum(s.wanted_stage is not None for s in self.scored),
            "stage": sum(s.stage_right for s in self.scored),
            "fixes_stated": len(fixes),
            "fix_given": sum(s.fix_given for s in fixes),
            "fix_same_way": sum(s.fix_given and s.fix_same_way for s in fixes),
            "fix_starts": sum(s.fix_given and s.fix_starts for s in fixes),
            "fix_right": sum(s.fix_right for s in fixes),
            "excluded": len(self.excluded),
        }


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _moves_the_users_way(
    changes: dict[str, Any], previous: dict[str, Any], fix: WorkingFix
) -> bool:
    for flag, way in fix.flags.items():
        if flag not in changes:
            continue
        new, old = changes[flag], previous.get(flag)
        if way is True:
            if new is True:
                return True
        elif not isinstance(new, (int, float)) or not isinstance(old, (int, float)):
            return True  # the flag the user changed; its old value is not known to compare
        elif (new > old) if way == UP else (new < old):
            return True
    return False


def score_vllm(record: dict[str, Any]) -> Scored:
    report = diagnose(pasted(record))
    wanted = record["failure_kind"]
    got = report.diagnosis.kind
    wanted_stage = STAGE_OF_KIND.get(wanted)
    got_stage = report.diagnosis.stage or STAGE_OF_KIND.get(got)
    scored = Scored(
        id=record["id"],
        wanted=wanted,
        got=got,
        cause_right=got in DATASET_KINDS.get(wanted, frozenset({wanted})),
        wanted_stage=wanted_stage,
        got_stage=got_stage,
        fix=WORKING_FIXES.get(record["id"]),
    )
    hinted = diagnose(pasted(record), **user_options(record))
    best = None if hinted.prescription is None else hinted.prescription.best
    if best is not None:
        scored.fix_given = True
        scored.fix_starts = best.plan is not None and best.plan.starts
        scored.fix_text = ", ".join(f"{k}={v}" for k, v in best.changes.items())
        if scored.fix is not None:
            previous = {**_record_flags(record), **best.previous}
            scored.fix_same_way = _moves_the_users_way(best.changes, previous, scored.fix)
    return scored


def user_options(record: dict[str, Any]) -> dict[str, str | None]:
    """--model, --gpu and --vllm-version as the user types them (as the planner's scoring does:
    the hub repo the record's thread names, else the model as written; the card with the memory
    size the source states outside the log)."""
    model = _hub_ids().get(str(record["id"])) or (
        _model_argument(record["model"]) if record.get("model") else None
    )
    gpu = _plain(record.get("gpu") or "")
    if gpu and record.get("gpu_memory_gb") and not record.get("gpu_total_gib"):
        gpu = f"{gpu} {record['gpu_memory_gb']:g}GB"
    version = _plain(str(record.get("vllm_version") or "")).lstrip("v").split(" ")[0]
    return {
        "model_hint": model,
        "gpu_hint": gpu or None,
        "version_hint": version
        if version[:1].isdigit() and not version.startswith("0.1.")
        else None,
    }


def _record_flags(record: dict[str, Any]) -> dict[str, Any]:
    names = ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens")
    return {name: record[name] for name in names if record.get(name) is not None}


def score_sglang(record: dict[str, Any]) -> Scored:
    text = pasted(record)
    log = read_log(text)
    wanted = str(record["outcome"])
    got = (
        diagnose_sglang(log).diagnosis.kind if is_sglang_log(log) else diagnose(text).diagnosis.kind
    )
    return Scored(
        id=record["id"],
        wanted=wanted,
        got=got,
        cause_right=got in SGLANG_KINDS.get(wanted, frozenset({wanted})),
        wanted_stage=SGLANG_STAGES.get(wanted),
        got_stage=STAGE_OF_KIND.get(got),
    )


def _why_excluded(record: dict[str, Any], kind: str | None) -> str | None:
    if not kind:
        return "the record states no failure kind"
    if not (record.get("excerpt") or "").strip() and not (record.get("error_text") or "").strip():
        return "no excerpt and no error text to paste"
    return None


def _score_file(name: str, path: Path, sglang: bool) -> Batch:
    batch = Batch(name)
    for record in load(path):
        if sglang:
            if record["outcome"] == "ok":
                continue
            kind = record["outcome"]
            if kind is None:
                batch.excluded.append((record["id"], "outcome not stated (start or fail unknown)"))
                continue
        else:
            if record["outcome"] != "failure":
                continue
            kind = record.get("failure_kind")
        why = _why_excluded(record, kind)
        if why is not None:
            batch.excluded.append((record["id"], why))
            continue
        batch.scored.append(score_sglang(record) if sglang else score_vllm(record))
    return batch


def vllm_batches(names: Iterable[str] = VLLM_BATCHES) -> list[Batch]:
    return [score_file(n, UNSEEN / f"startup_logs_{n}.jsonl") for n in names]


def score_file(name: str, path: Path, sglang: bool = False) -> Batch:
    """A user has the Hugging Face hub: the doctor reads the model's config.json from it (the
    tests' offline copy of the published configs, as the planner's scoring uses)."""
    with emulated_hub():
        return _score_file(name, path, sglang)


def sglang_batches(names: Iterable[str] = SGLANG_BATCHES) -> list[Batch]:
    return [
        score_file(f"sglang {n}", UNSEEN / f"sglang_startup_logs_{n}.jsonl", sglang=True)
        for n in names
    ]
