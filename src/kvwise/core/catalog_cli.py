"""`kvwise models` and `kvwise gpus`: list the offline catalogs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvwise.core.catalog import catalog_entries
from kvwise.core.gpus import list_gpus
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


def _gpus(as_json: bool) -> int:
    gpus = list_gpus()
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": g.name,
                        "memory_gib": round(g.memory_gib, 2),
                        "bandwidth_gb_s": g.bandwidth_bytes_s / 1e9,
                        "bf16_tflops": g.bf16_flops / 1e12,
                        "fp8_tflops": None if g.fp8_flops is None else g.fp8_flops / 1e12,
                        "compute_capability": g.compute_capability,
                    }
                    for g in gpus
                ],
                indent=2,
            )
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GPU catalog (memory as CUDA reports it)")
    for column in ("GPU", "memory GiB", "bandwidth GB/s", "bf16 TFLOPS", "fp8 TFLOPS"):
        table.add_column(column)
    for g in gpus:
        fp8 = "-" if g.fp8_flops is None else f"{g.fp8_flops / 1e12:g}"
        table.add_row(
            g.name,
            f"{g.memory_gib:.2f}",
            f"{g.bandwidth_bytes_s / 1e9:g}",
            f"{g.bf16_flops / 1e12:g}",
            fp8,
        )
    Console().print(table)
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def run(name: str, argv: list[str]) -> int:
    parser = _Parser(prog=f"kvwise {name}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    return _models(args.json) if name == "models" else _gpus(args.json)
