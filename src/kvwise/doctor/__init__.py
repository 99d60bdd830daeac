"""`kvwise doctor`: read a vLLM log or traceback, name the root cause, prescribe the fix.

Public API: `diagnose(data, nvidia_smi=..., planner=..., model_hint=..., gpu_hint=...) -> Report`
(`Report.to_json()` is the CLI's `--json`). It never raises on a log's content: what it cannot
read becomes `kind: "unknown"` with what it did find.

Pipeline, one module per step:

    text.py         bytes -> clean lines (prefixes, colours, lost newlines, huge files)
    config_lines.py the configuration in every shape a log states it (commands, args, engine line)
    figures.py      vLLM's start-up figures in every wording, V0 0.4 to V1 0.33, in bytes
    signals.py      errors, kills, preemption; traceback frames and progress lines -> stage
    nvidia_smi.py   nvidia-smi dumps (tables old and new, CSV)
    parse.py        all of the above for one log: ParsedLog
    classify.py     the root cause (vocabulary in kinds.py) with the evidence lines
    explain.py      the summary sentence, with the log's numbers
    runtime.py      failures while serving: over-long requests (HTTP 400), a dead engine, timeouts
    torch_oom.py    PyTorch's OOM message: sizes, the processes it names, what it leaves unaccounted
    resolve.py      model and GPU names -> specs for the planner (free memory: what others hold)
    fix.py, levers.py, options.py, oom_options.py, runtime_options.py
                    the smallest change that starts, valued from the log; every one re-planned
    combine.py      no single change starts: the smallest combination, else what would
    command.py      the `vllm serve` command of a fix (never a placeholder)
    diagnose.py     the whole pipeline and its JSON; render.py the Rich view; cli.py the command
"""

from kvwise.doctor.diagnose import Report, diagnose

__all__ = ["Report", "diagnose"]
