"""The argument parser of every kvwise command."""

from __future__ import annotations

import argparse

from kvwise.errors import UsageError


class CommandParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so the dispatcher (`kvwise.cli`) prints one
    line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)
