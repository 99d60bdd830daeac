"""The argument parser of every kvwise command."""

from __future__ import annotations

import argparse
from typing import Any

from kvwise.errors import UsageError


class CommandParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so the dispatcher (`kvwise.cli`) prints one
    line and exits 2."""

    _checking_metavar = False

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        # argparse's add_argument makes a help formatter only to check the option's metavar
        self._checking_metavar = True
        try:
            return super().add_argument(*args, **kwargs)
        finally:
            self._checking_metavar = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        if self._checking_metavar:
            # Any width does for that check, which lays out no text. A formatter given none
            # asks shutil for the terminal's, and importing shutil (with zlib, bz2 and lzma)
            # was ~3% of a cold `kvwise plan`, which prints no help.
            return self.formatter_class(prog=self.prog, width=80)  # type: ignore[call-arg]
        return super()._get_formatter()
