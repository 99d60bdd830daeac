"""`kvwise models` and `kvwise gpus`: list the offline catalogs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kvwise.core.catalog import catalog_entries
from kvwise.core.command_parser import CommandParser
from kvwise.core.gpu_names import normalize
from kvwise.core.gpus import GpuSpec, find_gpu, list_gpus
from kvwise.core.weights import count_params
from kvwise.errors import KvwiseError

# `kvwise models` columns, most important first (the id is what `plan` takes)
_MODEL_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("model", lambda r: r["id"]),
    ("max len", lambda r: str(r.get("max_position_embeddings") or "")),
    ("params (B)", lambda r: f"{r['params_b']:.2f}" if r["modelled"] else ""),
    ("quantization", lambda r: r.get("quantization") or ""),
    ("architecture", lambda r: r["architecture"] if r["modelled"] else "not modelled"),
)


def _models(as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    for entry in catalog_entries():
        try:
            spec = entry.spec()
        except KvwiseError as exc:
            rows.append({"id": entry.model_id, "modelled": False, "reason": str(exc)})
            continue
        rows.append(
            {
                "id": entry.model_id,
                "modelled": True,
                "architecture": spec.architecture,
                "params_b": round(count_params(spec) / 1e9, 2),
                "quantization": spec.quant.label if spec.quant else None,
                "max_position_embeddings": spec.max_position_embeddings,
                "source": entry.sources[0] if entry.sources else None,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    headers = [header for header, _ in _MODEL_COLUMNS]
    cells = [[cell(row) for _, cell in _MODEL_COLUMNS] for row in rows]
    _print_table("Offline model catalog", headers, cells, wrapped="architecture")
    return 0


def _print_table(title: str, headers: list[str], cells: list[list[str]], *, wrapped: str) -> None:
    """A table that keeps the leading columns that fit whole: a narrow terminal or a pipe
    leaves columns out (saying so) rather than cutting a value someone copies."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if max(len(row[0]) for row in [headers, *cells]) + 4 > console.width:
        # not even the first column fits in a box: one value a line, whole
        console.print(f"{title} ({headers[0]} only at this width; --json has all)")
        for row in cells:
            console.print(row[0], soft_wrap=True, markup=False, highlight=False)
        return
    shown = _columns_that_fit(headers, cells, console.width, wrapped)
    left_out = len(headers) - shown
    table = Table(
        title=title,
        caption=f"{left_out} columns left out at this width; --json has all" if left_out else None,
    )
    for index, header in enumerate(headers[:shown]):
        if index == 0:  # the value to copy: folded at the edge of a very narrow terminal, never cut
            table.add_column(header, overflow="fold")
        else:
            table.add_column(header, no_wrap=header != wrapped)
    for row in cells:
        table.add_row(*row[:shown])
    console.print(table)


# `kvwise gpus` columns, most important first: on a narrow terminal or a pipe the table keeps
# a leading run of them that fits, so the key --gpu takes is never cut
_GPU_COLUMNS: tuple[tuple[str, Callable[[GpuSpec], str]], ...] = (
    ("--gpu key", lambda g: g.key),
    ("memory GiB", lambda g: f"{g.memory_gib:.2f}"),
    ("GPU", lambda g: g.name),
    ("bandwidth GB/s", lambda g: f"{g.bandwidth_bytes_s / 1e9:g}"),
    ("bf16 TFLOPS", lambda g: f"{g.bf16_flops / 1e12:g}"),
    ("fp8 TFLOPS", lambda g: "-" if g.fp8_flops is None else f"{g.fp8_flops / 1e12:g}"),
    ("arch", lambda g: g.compute_capability),
)
_WRAPPED_COLUMN = "GPU"  # display names may wrap between words; every other cell stays whole


def _gpu_row(g: GpuSpec) -> dict[str, Any]:
    return {
        "key": g.key,
        "name": g.name,
        "memory_gib": round(g.memory_gib, 2),
        "bandwidth_gb_s": g.bandwidth_bytes_s / 1e9,
        "bf16_tflops": g.bf16_flops / 1e12,
        "fp8_tflops": None if g.fp8_flops is None else g.fp8_flops / 1e12,
        "compute_capability": g.compute_capability,
        "interconnect_gb_s": g.interconnect_bytes_s / 1e9,
    }


def _columns_that_fit(headers: list[str], cells: list[list[str]], width: int, wrapped: str) -> int:
    """How many leading columns fit in `width` (each column costs its text plus 3 for padding
    and border; the `wrapped` column counts its longest word)."""
    used, count = 1, 0
    for index, header in enumerate(headers):
        texts = [header] + [row[index] for row in cells]
        if header == wrapped:
            need = max(len(word) for text in texts for word in text.split())
        else:
            need = max(len(text) for text in texts)
        if used + need + 3 > width:
            break
        used, count = used + need + 3, count + 1
    return max(count, 1)


def _matching(query: str | None) -> list[GpuSpec]:
    """Every card whose key or name contains QUERY ('a100', '4060'), else the one card a driver
    name resolves to ('NVIDIA H100 80GB HBM3'), else the lookup's one-line refusal."""
    gpus = list_gpus()
    if not query:
        return gpus
    wanted = normalize(query)
    found = [
        g for g in gpus if wanted and (wanted in normalize(g.key) or wanted in normalize(g.name))
    ]
    return found or [find_gpu(query)]


def _gpus(as_json: bool, query: str | None = None) -> int:
    gpus = _matching(query)
    if as_json:
        print(json.dumps([_gpu_row(g) for g in gpus], indent=2))
        return 0
    cells = [[cell(g) for _, cell in _GPU_COLUMNS] for g in gpus]
    headers = [header for header, _ in _GPU_COLUMNS]
    _print_table("GPU catalog (memory as CUDA reports it)", headers, cells, wrapped=_WRAPPED_COLUMN)
    return 0


def run(name: str, argv: list[str]) -> int:
    parser = CommandParser(prog=f"kvwise {name}")
    parser.add_argument("--json", action="store_true")
    if name == "gpus":
        parser.add_argument(
            "query",
            nargs="?",
            help="only the cards whose key or name contains this ('a100', '4060'), or the one "
            "a driver name resolves to ('NVIDIA H100 80GB HBM3')",
        )
    args = parser.parse_args(argv)
    return _models(args.json) if name == "models" else _gpus(args.json, args.query)
