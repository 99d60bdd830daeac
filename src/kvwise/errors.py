"""The one exception hierarchy of kvwise.

    KvwiseError                     anything kvwise raises on purpose
    ├── UsageError                  the user asked for something invalid (CLI exit 2)
    │   ├── UnknownModelError       no such model in the catalog, on disk or on the hub
    │   ├── UnknownGpuError         no such GPU in the catalog
    │   ├── InvalidFlagError        a flag value vLLM would reject, or that makes no sense
    │   │   └── UnsupportedHardwareError  vLLM refuses this model or flag on this card (kernels)
    │   └── UnsupportedModelError   an architecture kvwise does not model (refused, never guessed)
    ├── DataError                   a file kvwise reads is malformed (config.json, log, results)
    └── UpstreamError               an engine or endpoint kvwise talks to misbehaved

The CLI turns each into one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations


class KvwiseError(Exception):
    """Base class of every error kvwise raises deliberately."""

    exit_code = 1


class UsageError(KvwiseError):
    exit_code = 2


class UnknownModelError(UsageError):
    pass


class UnknownGpuError(UsageError):
    pass


class InvalidFlagError(UsageError):
    pass


class UnsupportedHardwareError(InvalidFlagError):
    pass


class UnsupportedModelError(UsageError):
    pass


class DataError(KvwiseError):
    exit_code = 2


class UpstreamError(KvwiseError):
    pass
