"""`kvwise top [URL...]`: the live view of a `kvwise serve` gateway or of vLLM or SGLang engines.

kvwise top                              the gateway on http://127.0.0.1:8000
kvwise top http://gpu1:8000 http://gpu2:8000   two engines, read directly
kvwise top http://gpu1:30000            an SGLang server (started with --enable-metrics)
kvwise top --once --json URL            one status as JSON, for scripts
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import httpx

from kvwise.core.command_parser import CommandParser
from kvwise.errors import UsageError
from kvwise.top.sources import Source, detect, poll

DEFAULT_URL = "http://127.0.0.1:8000"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="kvwise top", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("urls", nargs="*", metavar="URL", help=f"default: {DEFAULT_URL}")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    parser.add_argument("--once", action="store_true", help="print one status and exit")
    parser.add_argument("--json", action="store_true", help="with --once: the status as JSON")
    parser.add_argument("--admin-key", default=os.environ.get("KVWISE_ADMIN_KEY"),
                        help="the gateway's admin key (default: $KVWISE_ADMIN_KEY)")  # fmt: skip
    parser.add_argument("--planned-kv-tokens", type=int, default=None,
                        help="engines read directly: the planned KV pool to compare with")  # fmt: skip
    parser.add_argument("--engine", choices=("vllm", "sglang"), default=None,
                        help="engines read directly: the engine expected (default: told by "
                        "the metric names, vllm: or sglang:)")  # fmt: skip
    return parser


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.interval <= 0:
        raise UsageError("--interval must be > 0 seconds")
    if args.json and not args.once:
        raise UsageError("--json goes with --once (the live view is for a terminal)")
    headers = {"authorization": f"Bearer {args.admin_key}"} if args.admin_key else {}
    with httpx.Client() as client:
        sources = [
            detect(client, u, headers, args.planned_kv_tokens, args.engine)
            for u in args.urls or [DEFAULT_URL]
        ]
        if args.once:
            if not all(s.is_gateway for s in sources):
                poll(client, sources, headers)  # engines: two scrapes, so rates have a window
                time.sleep(min(args.interval, 5.0))
            return _print_once(poll(client, sources, headers), args)
        return _live(client, sources, headers, args.interval)


def _print_once(status: dict[str, object], args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(status, indent=1))
    else:
        from rich.console import Console

        from kvwise.top.render import view

        Console().print(view(status, args.interval))
    return 1 if status.get("unreachable") else 0


def _live(
    client: httpx.Client, sources: list[Source], headers: dict[str, str], interval_s: float
) -> int:
    from rich.console import Console
    from rich.live import Live

    from kvwise.top.render import view

    console = Console()
    try:
        with Live(console=console, auto_refresh=False, screen=sys.stdout.isatty()) as live:
            while True:
                live.update(view(poll(client, sources, headers), interval_s), refresh=True)
                time.sleep(interval_s)
    except KeyboardInterrupt:  # the usual way out: Live has restored the terminal already
        return 0
