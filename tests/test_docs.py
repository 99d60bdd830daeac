"""Every command in the README and docs/ works as written.

The fenced shell blocks are read as a user would paste them (backslash continuations joined,
comments dropped). Offline commands (plan, simulate, models, gpus) are run; commands that need a
server or a file (serve, bench, calibrate, doctor) are parsed by the command's own parser, so a
renamed or removed flag in the docs fails here.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from kvwise.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"plan", "simulate", "models", "gpus"}  # offline and quick: run as written
PARSE = {"serve", "bench", "calibrate", "doctor", "deploy", "top"}  # need a server: parse only


def _shell_lines(text: str) -> list[str]:
    lines: list[str] = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.DOTALL):
        joined = block.replace("\\\n", " ")
        lines += [line.strip() for line in joined.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith("#")]


def _kvwise_commands() -> list[tuple[str, list[str]]]:
    found = []
    for doc in DOCS:
        for line in _shell_lines(doc.read_text()):
            for part in re.split(r"\s*(?:&&|;|\|)\s*", line):
                words = shlex.split(part, comments=True)
                if words and Path(words[0]).name == "kvwise":
                    found.append((f"{doc.name}: {part}", words[1:]))
    return found


COMMANDS_IN_DOCS = _kvwise_commands()


def test_the_docs_show_commands_to_check() -> None:
    names = {argv[0] for _, argv in COMMANDS_IN_DOCS}
    assert {"plan", "serve"} <= names


@pytest.mark.parametrize(("where", "argv"), COMMANDS_IN_DOCS, ids=[w for w, _ in COMMANDS_IN_DOCS])
def test_each_documented_command_works_as_written(
    where: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = argv[0]
    assert name in COMMANDS, f"{where}: no such command"
    if name in RUN:
        code = main(argv)
        captured = capsys.readouterr()
        # plan exits 1 when vLLM would refuse to start: still an answer, not an error
        assert code in (0, 1), f"{where}: exit {code}: {captured.err}"
        assert captured.out.strip(), f"{where}: printed nothing"
        assert "Traceback" not in captured.err
        return
    assert name in PARSE, f"{where}: add {name} to RUN or PARSE"
    parser = importlib.import_module(COMMANDS[name][0]).build_parser()
    parser.parse_args(argv[1:])
