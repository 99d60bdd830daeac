"""`kvwise doctor` on an SGLang log: parse, classify, re-plan the fix, print it or its JSON."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvwise.doctor.resolve import Resolved, resolve
from kvwise.doctor.sglang_diagnose import SglangDiagnosis, classify_sglang
from kvwise.doctor.sglang_fix import SglangFix, gpu_as_logged, log_flags, prescribe_sglang
from kvwise.doctor.sglang_log import SglangLog, parse_sglang
from kvwise.doctor.text import LogLine, LogText

_RANK_PREFIX = re.compile(r"^(?:\[[^\]]*)?(?:DP\d+ )?TP\d+(?: EP\d+)?\] ")


def quote(line: LogLine) -> str:
    """The line as quoted evidence, without SGLang's `[time TPn]` prefix."""
    return f"line {line.number}: {_RANK_PREFIX.sub('', line.message)[:300]}"


@dataclass(frozen=True)
class SglangReport:
    diagnosis: SglangDiagnosis
    log: SglangLog
    resolved: Resolved
    fix: SglangFix | None

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": "sglang",
            "kind": self.diagnosis.kind,
            "summary": self.diagnosis.summary,
            "evidence": [quote(line) for line in self.diagnosis.evidence],
            "parsed": {
                "sglang_version": self.log.version,
                "flags": self.log.args,
                "figures": self.log.figures,
                "gpu_names": list(self.log.gpu_names),
                "notes": list(self.resolved.notes),
            },
            "fix": None if self.fix is None else _fix_json(self.fix),
        }


def _fix_json(fix: SglangFix) -> dict[str, Any]:
    before, after = fix.before, fix.after
    return {
        "change": fix.change,
        "sglang_release_family": after.family,
        "max_total_num_tokens": {
            "before": before.max_total_num_tokens,
            "after": after.max_total_num_tokens,
        },
        "mem_fraction_static": {
            "before": round(before.mem_fraction_static, 3),
            "after": round(after.mem_fraction_static, 3),
        },
        "starts": after.starts,
        "warnings": list(after.warnings),
        "command": fix.command,
    }


def diagnose_sglang(
    text: LogText,
    *,
    model_hint: str | None = None,
    gpu_hint: str | None = None,
    version_hint: str | None = None,
) -> SglangReport:
    log = parse_sglang(text)
    diagnosis = classify_sglang(log)
    resolved = resolve(
        log.args.get("model_path"), log.gpu_names, None, model_hint=model_hint, gpu_hint=gpu_hint
    )
    fix = None
    if resolved.model is not None and resolved.gpu is not None:
        flags, sglang = log_flags(log, version_hint)
        gpu = gpu_as_logged(resolved.gpu, log, flags.tensor_parallel_size or 1)
        fix = prescribe_sglang(diagnosis, resolved.model, gpu, flags, sglang)
    return SglangReport(diagnosis, log, resolved, fix)


def render_sglang(report: SglangReport, console: Any) -> None:
    console.print(f"[bold]SGLang: {report.diagnosis.kind}[/]")
    console.print(report.diagnosis.summary, highlight=False)
    for line in report.diagnosis.evidence:
        console.print(f"  {quote(line)}", markup=False, highlight=False)
    for note in report.resolved.notes:
        console.print(f"[yellow]{note}[/]", highlight=False)
    fix = report.fix
    if fix is None:
        return
    console.print(
        f"\nFix: {fix.change} -> KV pool {fix.before.max_total_num_tokens:,} -> "
        f"{fix.after.max_total_num_tokens:,} tokens (re-planned, SGLang {fix.after.family})",
        highlight=False,
    )
    for warning in fix.after.warnings:
        console.print(f"[yellow]{warning}[/]", highlight=False)
    console.print(_fix_json(fix)["command"], markup=False, highlight=False, soft_wrap=True)
