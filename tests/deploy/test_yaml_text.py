"""Everything kvwise writes as YAML reads back as the same data (YAML 1.1 rules, as PyYAML and
Kubernetes read it)."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from kvwise.deploy.yaml_text import dump, dump_all

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_SCALARS = (
    st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
    | st.sampled_from(["yes", "no", "on", "off", "null", "~", "0.92", "1e3", "-x", "a: b", "#c"])
)
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(_DATA)
def test_any_data_round_trips(data: Any) -> None:
    assert yaml.safe_load(dump(data)) == data


@given(st.lists(st.dictionaries(_TEXT, _DATA, min_size=1, max_size=3), min_size=1, max_size=3))
def test_several_documents_round_trip(documents: list[dict[str, Any]]) -> None:
    assert list(yaml.safe_load_all(dump_all(documents))) == documents
