"""Running `kvwise deploy` and `kvwise plan` as a user would, and reading what they wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvwise.cli import main

MODEL = "Qwen/Qwen2.5-7B-Instruct"
K8S_VERSION = "1.32.0"  # the Kubernetes release the manifests are validated against


def deploy(
    capsys: pytest.CaptureFixture[str], out: Path, *argv: str, model: str | None = MODEL
) -> dict[str, Any]:
    """`kvwise deploy ... --json`; returns the JSON summary (fails the test on a non-zero exit)."""
    words = [model] if model else []
    code = main(["deploy", *words, "--gpu", "rtx4090", "--out", str(out), "--json", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return dict(json.loads(captured.out))


def plan_flags(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """The flags `kvwise plan --json` resolves for the same model, card and flags."""
    code = main(["plan", MODEL, "--gpu", "rtx4090", "--json", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return dict(json.loads(captured.out)["flags"])


def expected_flag_values(flags: dict[str, Any]) -> dict[str, Any]:
    """`--flag` -> value for every flag the plan sets (vLLM's own `auto` and off values aside)."""
    wanted = {}
    for name, value in flags.items():
        if value is None or value == "auto" or isinstance(value, (bool, list)):
            continue
        if name in ("cpu_offload_gb", "swap_space") and not value:
            continue
        if name in ("enable_prefix_caching", "enable_chunked_prefill"):
            continue
        wanted[f"--{name.replace('_', '-')}"] = value
    return wanted


def assert_each_flag_once(args: list[str], wanted: dict[str, Any]) -> None:
    for flag, value in wanted.items():
        assert args.count(flag) == 1, f"{flag} appears {args.count(flag)} times in {args}"
        given = args[args.index(flag) + 1]
        if isinstance(value, (int, float)):
            assert float(given) == float(value), f"{flag} {given} != plan's {value}"
        else:
            assert given == str(value), f"{flag} {given} != plan's {value}"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])
