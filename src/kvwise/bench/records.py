"""What one bench request measured, as written to the results file (pydantic: a file edge).

Times are seconds on the run's clock (0 = the run's start). A request's first token arrives at
`sent_s + ttft_s`, its last at `sent_s + ttft_s + sum(itl_s)`, the stream ends at
`sent_s + e2el_s`. Token counts are the server's usage fields when it reports them (`None`
otherwise); `planned_*` are what the workload asked for, counted with bench's tokenizer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session: int  # index of the workload's session
    turn: int  # index of the turn in its session
    sent_s: float
    ttft_s: float | None  # None when no token came back
    itl_s: list[float]  # gaps between consecutive content chunks
    e2el_s: float
    prompt_tokens: int | None  # usage.prompt_tokens
    output_tokens: int | None  # usage.completion_tokens, else counted from the streamed text
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when sent
    planned_prompt_tokens: int  # history + new segments, without the chat template
    planned_output_tokens: int  # the workload's output length (sent as max_tokens)
    new_segments: list[tuple[int, int]]  # the turn's (segment id, tokens), as sent
    finish_reason: str | None = None
    error: str | None = None

    @property
    def is_ok(self) -> bool:
        return self.error is None

    @property
    def first_token_s(self) -> float | None:
        return None if self.ttft_s is None else self.sent_s + self.ttft_s

    @property
    def last_token_s(self) -> float | None:
        return None if self.ttft_s is None else self.sent_s + self.ttft_s + sum(self.itl_s)

    @property
    def finish_s(self) -> float:
        return self.sent_s + self.e2el_s

    @property
    def input_tokens(self) -> int:
        """Prompt tokens as the server counted them, else as bench planned them."""
        return self.planned_prompt_tokens if self.prompt_tokens is None else self.prompt_tokens

    @property
    def tpot_s(self) -> float | None:
        """vLLM bench's TPOT: (E2E - TTFT) / (output tokens - 1), for more than one token."""
        if self.ttft_s is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)
