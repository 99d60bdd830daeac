"""YAML text from plain data, with PyYAML (imported here only: `kvwise plan` never loads it).

Block style, keys in the order written (a manifest reads top down), non-ASCII escaped (PyYAML
reads an unescaped U+0085 back as a space), and every string that YAML
1.1 would read as something else (yes, on, 0755...) quoted: Kubernetes and Helm parse YAML 1.1.
"""

from __future__ import annotations

from typing import Any

import yaml


def dump(data: Any) -> str:
    """One YAML document."""
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=False))


def dump_all(documents: list[Any]) -> str:
    """Several documents separated by `---`, as kubectl reads a multi-object file."""
    text = yaml.safe_dump_all(
        documents, sort_keys=False, default_flow_style=False, allow_unicode=False
    )
    return str(text)
