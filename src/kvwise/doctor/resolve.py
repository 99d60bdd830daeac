"""From the names a log uses to the specs the planner needs; failures are reported, not raised.

Logs name models by hub id or by a local path (`/models/Qwen2.5-7B-Instruct`), and GPUs by
their marketing name, or only by the total memory CUDA reported. The total printed by vLLM is
the truth for this machine, so it replaces the catalog's figure when both are known.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvwise.core.catalog import closest_models, load_model
from kvwise.core.gpus import GIB, GpuSpec, custom_gpu, find_gpu
from kvwise.core.models import ModelSpec
from kvwise.errors import KvwiseError, UnsupportedModelError


@dataclass(frozen=True)
class Resolved:
    model: ModelSpec | None
    gpu: GpuSpec | None
    notes: tuple[str, ...]
    model_name: str | None = None  # as the user named it (--model, else the log)


def resolve(
    model_name: str | None,
    gpu_names: tuple[str, ...],
    total_bytes: float | None,
    *,
    free_bytes: float | None = None,
    model_hint: str | None = None,
    gpu_hint: str | None = None,
) -> Resolved:
    model, model_note = resolve_model(model_hint or model_name)
    gpu, gpu_note = resolve_gpu(gpu_names, total_bytes, gpu_hint)
    if gpu is not None and free_bytes is not None:
        gpu = replace(gpu, free_bytes=int(free_bytes))  # another process's share is not free
    notes = tuple(n for n in (model_note, gpu_note) if n)
    return Resolved(model, gpu, notes, model_hint or model_name)


def resolve_model(name: str | None) -> tuple[ModelSpec | None, str | None]:
    if not name:
        return None, "the log names no model (pass --model)"
    candidates = [name, name.rstrip("/")]
    candidates.append(candidates[-1].rsplit("/", 1)[-1])
    for candidate in dict.fromkeys(candidates):
        try:
            return load_model(candidate), None
        except UnsupportedModelError as exc:
            return None, f"model {candidate!r}: {str(exc).split(' (modelled:')[0]}"
        except (KvwiseError, OSError, RuntimeError):
            # OSError: a "name" too long to be a path; RuntimeError: `~name` with no such user
            continue
    close = closest_models(name.rstrip("/").rsplit("/", 1)[-1])
    hint = f"; closest catalog entries: {', '.join(close)}" if close else ""
    return None, f"model {name!r} is not in the offline catalog (pass --model){hint}"


def resolve_gpu(
    names: tuple[str, ...], total_bytes: float | None, hint: str | None = None
) -> tuple[GpuSpec | None, str | None]:
    """The first name the catalog knows (`hint`, the user's --gpu, first); why not, if none."""
    refused: dict[str, str] = {}
    for name in ((hint,) if hint else ()) + names:
        try:
            # the total vLLM logged narrows a family name ("NVIDIA A100") to its memory size
            spec = find_gpu(name, total_bytes / GIB if total_bytes else None)
        except KvwiseError as exc:
            refused.setdefault(name, str(exc))
            continue
        if total_bytes:
            # the total CUDA reported on this machine beats the catalog's
            spec = replace(spec, memory_bytes=int(total_bytes))
        return spec, None
    if total_bytes:
        return custom_gpu(total_bytes / GIB), None
    if hint:  # the user named a GPU the catalog does not take as it is: say why
        return None, f"--gpu {hint}: {refused[hint]}"
    return None, "the log names no GPU and no total GPU memory (pass --gpu)"
