"""What a user copies from a table (a model id, a flag) is whole in a narrow terminal or a pipe."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main


@pytest.mark.parametrize("columns", ["50", "60", "80"])
def test_every_model_id_is_whole(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "--json"]) == 0
    ids = [row["id"] for row in json.loads(capsys.readouterr().out)]
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    cells = {cell.strip() for line in out.splitlines() for cell in line.split("│")}  # a box or not
    missing = [i for i in ids if i not in cells]
    assert not missing, missing[:5]


@pytest.mark.parametrize("columns", ["60", "80"])
def test_every_explain_flag_is_whole(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--explain"]
    assert main([*argv, "--json"]) == 0
    flags = {w for e in json.loads(capsys.readouterr().out)["knobs"] for w in e["knob"].split()}
    monkeypatch.setenv("COLUMNS", columns)
    assert main(argv) == 0
    words = {w for line in capsys.readouterr().out.splitlines() for w in line.split()}
    assert {f for f in flags if f.startswith("--")} <= words
