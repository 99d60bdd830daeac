"""YAML text from plain data (dicts, lists, str, int, float, bool), without a YAML library.

Block style throughout; a string is written plain only when YAML 1.1 and 1.2 both read it back
as the same string, otherwise as a JSON string (JSON's escapes are valid in YAML's
double-quoted style). Tests read every artefact back with PyYAML and compare.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
# words YAML 1.1 reads as booleans or null (Kubernetes and Helm parse with YAML 1.1 rules)
_RESERVED = {
    "y", "n", "yes", "no", "true", "false", "on", "off", "null", "nan", "inf",
}  # fmt: skip


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if value is None:
        return "null"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return _quoted(text)


# characters written raw in a quoted scalar: YAML's printable set less its line breaks (\x85,
# \u2028, \u2029) and the byte-order mark; everything else is escaped as \uXXXX
_ESCAPED = re.compile(
    r"[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)


def _quoted(text: str) -> str:
    """A double-quoted scalar: JSON's escapes for quotes, backslashes and control characters
    (valid YAML escapes), other characters raw unless YAML forbids them raw."""
    quoted = json.dumps(text, ensure_ascii=False)
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"no YAML form for {value} in a manifest")
    text = repr(value)
    # YAML 1.1 (PyYAML, Kubernetes' sigs.k8s.io/yaml) reads an exponent as a float only with a dot
    mantissa, _, exponent = text.partition("e")
    if exponent and "." not in mantissa:
        text = f"{mantissa}.0e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return text


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict) and value:
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_scalar(key)}:")
                lines += _lines(item, indent if isinstance(item, list) else indent + 2)
            else:
                lines.append(f"{pad}{_scalar(key)}: {_inline(item)}")
        return lines
    if isinstance(value, list) and value:
        lines = []
        for item in value:
            nested = _lines(item, indent + 2)
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines += nested[1:]
            else:
                lines.append(f"{pad}- {_inline(item)}")
        return lines
    return [f"{pad}{_inline(value)}"]


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def dump(value: Any) -> str:
    """One YAML document."""
    return "\n".join(_lines(value, 0)) + "\n"


def dump_all(documents: list[Any]) -> str:
    """Several YAML documents, separated by `---` (as `kubectl apply -f` reads them)."""
    return "---\n".join(dump(doc) for doc in documents)
