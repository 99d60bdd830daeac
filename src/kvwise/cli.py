"""Command-line entry point: a thin dispatcher over the capability packages.

Only the chosen sub-command's module is imported, so `kvwise plan` never pays for the gateway's
or the simulator's imports. Each command module exposes `run(argv: list[str]) -> int`.
"""

from __future__ import annotations

import importlib
import sys

from kvwise import __version__
from kvwise.errors import KvwiseError

# name -> (module that implements it, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("kvwise.advisor.cli", "will it start, how many KV tokens fit, which flags to use"),
    "simulate": ("kvwise.sim.cli", "latency, throughput, KV use and preemptions (vLLM or SGLang)"),
    "serve": ("kvwise.gateway.cli", "OpenAI-compatible gateway with KV-token admission control"),
    "bench": ("kvwise.bench.cli", "multi-turn load against any OpenAI-compatible endpoint"),
    "calibrate": ("kvwise.bench.calibrate_cli", "fit the step-time model from bench results"),
    "top": ("kvwise.top.cli", "live view of a gateway, vLLM or SGLang: KV use, queue, latency"),
    "doctor": ("kvwise.doctor.cli", "explain a vLLM start-up log or traceback"),
    "deploy": ("kvwise.deploy.cli", "Kubernetes, Helm or Ray files with the planned flags"),
    "models": ("kvwise.core.catalog_cli", "list the offline model catalog"),
    "gpus": ("kvwise.core.catalog_cli", "list the GPU catalog"),
}


# command -> (the optional extra it needs, the top-level modules that extra installs)
_SERVE_MODULES = frozenset(
    {"starlette", "uvicorn", "httpx", "httpcore", "h11", "anyio", "redis", "tokenizers",
     "httptools", "uvloop", "prometheus_client"}
)  # fmt: skip
EXTRAS: dict[str, tuple[str, frozenset[str]]] = {
    "serve": ("serve", _SERVE_MODULES),
    "bench": ("serve", _SERVE_MODULES),
    "calibrate": ("calibrate", frozenset({"scipy", "numpy"})),
    "top": ("serve", _SERVE_MODULES),
}


def _missing_extra(name: str, exc: ModuleNotFoundError) -> str | None:
    """One line naming the extra to install, when `exc` is a module of that extra."""
    extra = EXTRAS.get(name)
    missing = (exc.name or "").split(".")[0]
    if extra is None or missing not in extra[1]:
        return None
    return (
        f"kvwise {name}: needs the '{extra[0]}' extra (no module {missing!r}): "
        f"pip install 'kvwise[{extra[0]}]'  (from a checkout: pip install -e '.[{extra[0]}]')"
    )


def _module_for(name: str, rest: list[str]) -> str:
    """`kvwise plan` without --workload (or --help, which lists it) is the planner's alone: it
    stays clear of the simulator's imports and answers from a cold process in ~0.2 s."""
    wants_all = any(a in ("-h", "--help") or a.split("=")[0] == "--workload" for a in rest)
    if name == "plan" and not wants_all:
        return "kvwise.planner.cli"
    return COMMANDS[name][0]


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"usage: kvwise COMMAND [options]   (kvwise {__version__})", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "Run `kvwise COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] == "--version":
        print(__version__)
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(
            f"kvwise: unknown command {name!r}; choose from: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 2
    try:
        module = importlib.import_module(_module_for(name, rest))
        return int(module.run(rest) if name not in ("models", "gpus") else module.run(name, rest))
    except ModuleNotFoundError as exc:  # an optional extra not installed: say which, no traceback
        line = _missing_extra(name, exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    except KvwiseError as exc:
        print(f"kvwise {name}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"kvwise {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed: not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
