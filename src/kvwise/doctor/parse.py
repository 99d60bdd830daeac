"""Everything a log says about the deployment: version, engine, model, flags, GPU, figures.

`parse_log` never raises on any text; what it cannot find stays absent. Values can occur many
times (several ranks, several attempts pasted together); `ParsedLog.figure(name, before=i)` picks
the last one at or before the line that failed, which is the attempt the error belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvwise.doctor import config_lines
from kvwise.doctor.config_lines import ConfigFinding
from kvwise.doctor.figures import Occurrence, find_figures
from kvwise.doctor.nvidia_smi import NvidiaSmi, parse_nvidia_smi
from kvwise.doctor.signals import Hit, find_phases, find_signals
from kvwise.doctor.text import LogLine, LogText

_VERSION_PATTERNS = (
    r"vLLM API server version\s+v?(?P<v>\d+\.\d+[\w.+-]*)",
    r"LLM engine \(v(?P<v>\d+\.\d+[\w.+-]*)\)",
    r"vLLM Version\s*:\s*v?(?P<v>\d+\.\d+[\w.+-]*)",
    r"\bvllm[=\s]=?=\s*v?(?P<v>\d+\.\d+[\w.+-]*)",
    r"vllm-openai:v(?P<v>\d+\.\d+[\w.+-]*)",
    r"\bvllm\s+(?:version\s+)?v(?P<v>\d+\.\d+\.\d+[\w.+-]*)",
)
_LLM_CALL = re.compile(r"\bLLM\(\s*model\s*=")
_ENGINE_LINE = re.compile(r"Initializing an? (?:(?P<engine>V[01]) )?LLM engine")
_V1_SOURCES = ("gpu_worker.py", "gpu_model_runner.py", "kv_cache_utils.py", "core.py")
_V0_SOURCES = ("worker.py", "model_runner.py", "llm_engine.py", "gpu_executor.py")
# GPU names as logs and users write them (the catalog resolves the spelling)
_GPU_NAME = re.compile(
    r"\b(?:[Rr][Tt][Xx][ -]?\d{4}(?: ?Ti)?|A100|H100|H200|L40S|L4|A10G|A10|T4|V100|B200)\b"
    r"(?:[- ]?(?:SXM\d?|PCIe|PCIE|NVL|\d+GB|HBM3))*"
)


# flags that vLLM's own lines state as resolved (they win over a pasted command)
RESOLVED_FIGURES = (
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
)


@dataclass(frozen=True)
class ParsedLog:
    log: LogText
    version: str | None
    engine: str | None  # "V0" / "V1"
    configs: tuple[ConfigFinding, ...]
    figures: dict[str, tuple[Occurrence, ...]]
    signals: dict[str, tuple[Hit, ...]]
    phases: dict[str, tuple[LogLine, ...]]
    gpu_names: tuple[str, ...]  # candidates, most specific first
    smi: NvidiaSmi
    notes: tuple[str, ...] = field(default=())

    @property
    def flashinfer_sampler(self) -> bool | None:
        """Whether the V1 sampler used FlashInfer, where the log says (None: it does not).

        v1/sample/ops/topk_topp_sampler.py:TopKTopPSampler.__init__ logs "Using FlashInfer for
        top-p & top-k sampling." when it takes FlashInfer (0.8-0.33), and "... Falling back to
        the PyTorch-native implementation of top-p & top-k sampling" when FlashInfer is missing
        or turned off (0.8-0.11.0; from 0.11.1 the default sampler says so only at DEBUG).
        """
        if "Using FlashInfer for top-p & top-k sampling" in self.log.joined:
            return True
        if "PyTorch-native implementation of top-p & top-k sampling" in self.log.joined:
            return False
        return None

    def figure(self, name: str, before: int | None = None) -> float | None:
        """The last value of a figure at or before line `before` (else the last anywhere)."""
        occurrences = self.figures.get(name, ())
        if before is not None:
            earlier = [o for o in occurrences if o.line.number <= before]
            occurrences = tuple(earlier) or occurrences
        return occurrences[-1].value if occurrences else None

    def figure_line(self, name: str, before: int | None = None) -> LogLine | None:
        occurrences = self.figures.get(name, ())
        if before is not None:
            occurrences = tuple(o for o in occurrences if o.line.number <= before) or occurrences
        return occurrences[-1].line if occurrences else None

    def model(self, before: int | None = None) -> str | None:
        models = [c.model for c in self._configs_before(before) if c.model]
        return models[-1] if models else None

    def flags(self, before: int | None = None) -> dict[str, Any]:
        """The configuration in force: stated flags, overridden by what vLLM itself printed."""
        flags: dict[str, Any] = {}
        for finding in sorted(self._configs_before(before), key=_config_rank):
            flags.update(finding.flags)
        for name in RESOLVED_FIGURES:
            value = self.figure(name, before)
            if value is not None:
                flags[name] = value if name == "gpu_memory_utilization" else int(value)
        if self.figures.get("max_num_batched_tokens"):  # "Chunked prefill is enabled with ..."
            flags.setdefault("enable_chunked_prefill", True)
        return flags

    def explicit_flags(self, before: int | None = None) -> dict[str, Any]:
        flags: dict[str, Any] = {}
        for finding in self._configs_before(before):
            if finding.is_explicit:
                flags.update(finding.flags)
        return flags

    def _configs_before(self, before: int | None) -> tuple[ConfigFinding, ...]:
        if before is None:
            return self.configs
        earlier = tuple(c for c in self.configs if c.line_number <= before)
        return earlier or self.configs


def _config_rank(finding: ConfigFinding) -> int:
    # later entries win: a pasted command < the server's args < vLLM's resolved engine config
    order = ("command", "llm_call", "namespace", "non_default_args", "engine_config")
    return order.index(finding.shape)


def parse_log(
    log: LogText, smi_text: str | None = None, version_hint: str | None = None
) -> ParsedLog:
    """Everything the log states; `version_hint` stands in when the log names no release."""
    smi = parse_nvidia_smi(smi_text if smi_text is not None else log.joined)
    if smi_text is not None and smi.is_empty:
        smi = parse_nvidia_smi(log.joined)
    version = _version(log) or version_hint
    return ParsedLog(
        log=log,
        version=version,
        engine=_engine(log, version),
        configs=tuple(find_configs(log)),
        figures=find_figures(log),
        signals=find_signals(log),
        phases=find_phases(log),
        gpu_names=_gpu_names(log, smi),
        smi=smi,
    )


def _version(log: LogText) -> str | None:
    for pattern in _VERSION_PATTERNS:
        match = re.search(pattern, log.joined, re.IGNORECASE)
        if match:
            return match["v"].rstrip(".,)")
    return None


def _engine(log: LogText, version: str | None) -> str | None:
    match = _ENGINE_LINE.search(log.joined)
    if match and match["engine"]:
        return match["engine"]
    if "VLLM_USE_V1=0" in log.joined or "Falling back to V0" in log.joined:
        return "V0"
    if version is not None:
        numbers = re.match(r"(\d+)\.(\d+)", version)
        if numbers:
            # V1 became the default in 0.8; V0 was removed in 0.11 (VLLM_USE_V1=0 aside)
            return "V1" if (int(numbers[1]), int(numbers[2])) >= (0, 8) else "V0"
    sources = {line.source for line in log.lines if line.source}
    # V1's code lives under vllm/v1/ (traceback paths); its wording: "Model loading took"
    v1_marks = ("EngineCore", "/vllm/v1/", "Model loading took", "Available KV cache memory")
    if sources.intersection(_V1_SOURCES) or any(mark in log.joined for mark in v1_marks):
        return "V1"
    # V0's KV-fit error ("... can be stored in KV cache (N)") never appeared in V1 (0.5.0-0.10.2)
    v0_marks = (
        "# GPU blocks",
        "Loading model weights took",
        "/vllm/worker/",
        "that can be stored in KV cache (",
    )
    if sources.intersection(_V0_SOURCES) or any(mark in log.joined for mark in v0_marks):
        return "V0"
    if match:  # "Initializing an LLM engine" without V0/V1: before 0.8
        return "V0"
    return None


def _gpu_names(log: LogText, smi: NvidiaSmi) -> tuple[str, ...]:
    names = [gpu.name for gpu in smi.gpus]
    for match in re.finditer(r"GPU \d+:\s*([^\n,(]+)", log.joined):
        names.append(match.group(1).strip())
    names += [m.group(0).strip() for m in _GPU_NAME.finditer(log.joined)]
    return tuple(dict.fromkeys(n for n in names if n))


def find_configs(log: LogText) -> list[ConfigFinding]:
    findings = []
    for index, line in enumerate(log.lines):
        finding = _config_from_line(log, index, line.message)
        if finding is not None and (finding.flags or finding.model):
            findings.append(finding)
    return findings


def _config_from_line(log: LogText, index: int, message: str) -> ConfigFinding | None:
    number = log.lines[index].number
    if "non-default args:" in message:
        pairs = config_lines.pairs_from_dict_text(message.split("non-default args:", 1)[1])
        model = pairs.get("model") or pairs.get("model_tag")
        return ConfigFinding("non_default_args", number, _text(model), _flags(pairs))
    if "with config:" in message and "LLM engine" in message:
        pairs = config_lines.pairs_from_keywords(message.split("with config:", 1)[1])
        return ConfigFinding("engine_config", number, _text(pairs.get("model")), _flags(pairs))
    if "Namespace(" in message:
        pairs = config_lines.pairs_from_keywords(message.split("Namespace(", 1)[1])
        model = pairs.get("model") or pairs.get("model_tag")
        return ConfigFinding("namespace", number, _text(model), _flags(pairs))
    if "LLM(" in message and _LLM_CALL.search(message):
        pairs = config_lines.pairs_from_keywords(message.split("LLM(", 1)[1])
        return ConfigFinding("llm_call", number, _text(pairs.get("model")), _flags(pairs))
    return _command_from_line(log, index, message)


def _command_from_line(log: LogText, index: int, message: str) -> ConfigFinding | None:
    if message.startswith("File ") or ("vllm" not in message and "api_server" not in message):
        return None
    text = message
    # a command continued over lines with trailing backslashes
    for follow in log.lines[index + 1 : index + 40]:
        if not text.rstrip().endswith("\\"):
            break
        text = text.rstrip()[:-1] + " " + follow.message
    text = re.sub(r"\\\s", " ", text)
    tokens = config_lines.command_tokens(text) or config_lines.list_tokens(text)
    if not tokens:
        return None
    model, flags = config_lines.flags_from_tokens(tokens)
    return ConfigFinding("command", log.lines[index].number, model, flags)


def _flags(pairs: dict[str, object]) -> dict[str, Any]:
    return config_lines.flags_from_pairs(pairs)


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip().strip("'\"")
    return text if text and text.lower() != "none" else None
