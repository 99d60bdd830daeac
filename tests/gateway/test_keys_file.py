"""The keys file as an operator writes it: YAML (or JSON) with names and limits, or the older
one key per line; a mistake is one line naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvwise.errors import UsageError
from kvwise.gateway.keys_file import KeyEntry, KeyLimits, read_keys_file

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-0123456789abcdefgh"


def test_names_limits_and_defaults_are_read(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(f"""
# team keys
defaults:
  rate_rps: 5
  max_concurrency: 4
keys:
  - name: alice
    key: {ALICE}
    rate_rps: 20      # her own rate; the default concurrency
    burst: 40
    queue_share: 0.25
  - name: batch-jobs
    key: {BOB}
    weight: 0.5
""")
    assert read_keys_file(path) == (
        KeyEntry("alice", ALICE, KeyLimits(20, 40, 4, 0.25)),
        KeyEntry("batch-jobs", BOB, KeyLimits(5, None, 4, None, 0.5)),
    )


def test_json_is_read_as_well(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [{"name": "a", "key": ALICE, "max_concurrency": 2}]}))
    assert read_keys_file(path) == (KeyEntry("a", ALICE, KeyLimits(max_concurrency=2)),)


def test_one_key_per_line_still_works_each_named_by_a_digest(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# old format\nsk-one\n\n  sk-two  \n")
    entries = read_keys_file(path)
    assert [e.key for e in entries] == ["sk-one", "sk-two"]
    assert all(e.name.startswith("key-") and "sk-" not in e.name for e in entries)
    assert entries[0].name != entries[1].name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"keys:\n  - name: a\n    key: {ALICE}\n    rate_rps: 0\n",
         "keys[0].rate_rps: Input should be greater than 0"),
        (f"keys:\n  - name: a\n    key: {ALICE}\n    queue_share: 2\n",
         "keys[0].queue_share: Input should be less than or equal to 1"),
        (f"keys:\n  - name: a\n    key: {ALICE}\n    rate: 5\n",
         "keys[0].rate: Extra inputs are not permitted"),
        ("keys:\n  - name: a\n    key: short\n",
         "keys[0].key: String should have at least 16 characters"),
        (f"keys:\n  - key: {ALICE}\n", "keys[0].name: Field required"),
        (f"keys:\n  - name: has space\n    key: {ALICE}\n", "keys[0].name: String should match"),
        (f"keys:\n  - name: a\n    key: {ALICE}\n  - name: a\n    key: {BOB}\n",
         "keys[1].name: 'a' is used twice"),
        (f"keys:\n  - name: a\n    key: {ALICE}\n  - name: b\n    key: {ALICE}\n",
         "keys[1].key: the same key is listed twice"),
        ("defaults: {weight: -1}\nkeys: []\n", "defaults.weight: Input should be greater than 0"),
        ("keys: [\n", "not valid YAML at line 2"),
        ("names: []\n", "keys: Field required"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        read_keys_file(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert ALICE not in str(caught.value)  # an error never repeats a key


def test_serve_refuses_a_bad_keys_file_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(f"keys:\n  - name: a\n    key: {ALICE}\n    max_concurrency: many\n")
    command = [sys.executable, "-m", "kvwise.cli", "serve", "--upstream", "http://127.0.0.1:9",
               "--keys-file", str(path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"kvwise serve: error: keys file {path}: keys[0].max_concurrency: Input should be a valid "
        "integer, unable to parse string as an integer"
    ]
