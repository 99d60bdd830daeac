"""Shared test fixtures.

`fidelity_report` collects accuracy figures measured by tests (planner KV tokens, simulator
errors) and prints them at the end of the run, so every run shows the numbers behind the bars.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

_REPORT: list[str] = []


@pytest.fixture
def fidelity_report() -> Iterator[list[str]]:
    lines: list[str] = []
    yield lines
    _REPORT.extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REPORT:
        terminalreporter.section("kvwise fidelity figures")
        for line in _REPORT:
            terminalreporter.write_line(line)
