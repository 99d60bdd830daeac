"""The gateway's container image: kvwise publishes none, so `deploy` writes its Dockerfile."""

from __future__ import annotations

from kvwise import __version__

PYTHON_IMAGE = "python:3.12-slim"  # a Python release kvwise supports (requires-python >= 3.10)


def dockerfile() -> str:
    return (
        f"# kvwise gateway {__version__}: build from the kvwise source tree (pip install .[serve])\n"
        f"FROM {PYTHON_IMAGE}\n"
        "WORKDIR /src\n"
        "COPY . /src\n"
        'RUN pip install --no-cache-dir ".[serve]"\n'
        "EXPOSE 8000\n"
        'ENTRYPOINT ["kvwise", "serve"]\n'
    )
