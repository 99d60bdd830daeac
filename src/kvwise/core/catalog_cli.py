"""`kvwise models` and `kvwise gpus`: list the offline catalogs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from kvwise.core.catalog import catalog_entries
from kvwise.core.gpu_names import normalize
from kvwise.core.gpus import GpuSpec, find_gpu, list_gpus
from kvwise.core.weights import count_params
from kvwise.errors import KvwiseError, UsageError


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
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Offline model catalog")
    for column in ("model", "architecture", "params (B)", "quantization", "max len"):
        table.add_column(column)
    for row in rows:
        if row["modelled"]:
            table.add_row(
                row["id"],
                row["architecture"],
                f"{row['params_b']:.2f}",
                row["quantization"] or "",
                str(row["max_position_embeddings"]),
            )
        else:
            table.add_row(row["id"], "not modelled", "", "", "")
    Console().print(table)
    return 0


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


def _columns_that_fit(cells: list[list[str]], width: int) -> int:
    """How many leading columns fit in `width` (each column costs its text plus 3 for padding
    and border; the wrapped column counts its longest word)."""
    used, count = 1, 0
    for index, (header, _) in enumerate(_GPU_COLUMNS):
        texts = [header] + [row[index] for row in cells]
        if header == _WRAPPED_COLUMN:
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
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cells = [[cell(g) for _, cell in _GPU_COLUMNS] for g in gpus]
    shown = _columns_that_fit(cells, console.width)
    left_out = len(_GPU_COLUMNS) - shown
    table = Table(
        title="GPU catalog (memory as CUDA reports it)",
        caption=f"{left_out} columns left out at this width; --json has all" if left_out else None,
    )
    for header, _ in _GPU_COLUMNS[:shown]:
        table.add_column(header, no_wrap=header != _WRAPPED_COLUMN)
    for row in cells:
        table.add_row(*row[:shown])
    console.print(table)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def run(name: str, argv: list[str]) -> int:
    parser = _Parser(prog=f"kvwise {name}")
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
