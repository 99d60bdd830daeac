"""kvwise: plan, simulate, serve and debug vLLM deployments with numbers instead of folklore."""

__version__ = "0.1.0"
