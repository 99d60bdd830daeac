#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine, then runs lint, types and tests.
# Idempotent: a second run reuses what the first one installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# 1. The project and its development tools, in .venv
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[dev]'

# 2. Lint, format and types, then the tests (warnings are errors: see pyproject.toml)
.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
.venv/bin/mypy
.venv/bin/pytest "$@"
