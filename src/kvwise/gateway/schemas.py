"""Request bodies, validated once at the edge.

The fields the gateway acts on are typed and checked; every other field is passed through to the
engine untouched (`extra="allow"`, a deliberate exception to the project's `extra="forbid"`):
OpenAI clients send many optional fields (`logprobs`, `response_format`, `seed`, vLLM's
`ignore_eos`...) and the engine, not the gateway, is the authority on them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_CHOICES = 16  # `n`; more sequences per request than this is a mistake, not a workload


class _Passthrough(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Passthrough):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Passthrough):
    include_usage: bool | None = None


class _Common(_Passthrough):
    model: str = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    user: str | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None

    def reply_tokens(self) -> int | None:
        """OpenAI's newer `max_completion_tokens` wins over the deprecated `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    # OpenAI's and vLLM's default for /v1/completions is 16 tokens
    max_tokens: int | None = Field(default=16, ge=1)

    def prompts(self) -> list[str | list[int]]:
        """One entry per sequence the engine will run (a batch is several)."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(t, int) for t in prompt):
            return [prompt]  # type: ignore[list-item]
        return list(prompt)  # type: ignore[arg-type]


def describe_validation_error(exc: ValidationError) -> tuple[str, str | None]:
    """One line naming the field and the problem, and the field (OpenAI's `param`)."""
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first["loc"]) or None
    return f"{param or 'body'}: {first['msg']}", param
