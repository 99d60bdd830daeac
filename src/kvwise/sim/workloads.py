"""Workloads: what the clients send. One definition for `kvwise simulate` and `kvwise bench`.

A workload is a list of *sessions*; a session is a list of *turns*, sent one after the other
(each after the previous answer and a think time). A one-turn session is a plain request.
Each turn appends new *segments* (runs of tokens named by an id, see `request.py`) to the
session's history; with `keeps_history`, a turn's prompt is the previous prompt, the previous
answer and the new segments, so that consecutive turns share their prefix exactly as a real
chat or agent loop does. Segment ids are the content: equal ids are equal tokens (a shared
system prompt), fresh ids are new text. `kvwise bench` turns segments into text the same way.

Sessions start open loop (`start_times_s`, from `--request-rate` with Poisson, gamma or
constant spacing) or closed loop (as soon as one of `max_concurrency` slots is free).
Everything random draws from the `random.Random` passed in: same seed, same workload.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from kvwise.errors import UsageError
from kvwise.sim.request import Segment

WORKLOAD_KINDS = ("random", "sharegpt", "agent", "shared-prefix", "replay")
ARRIVALS = ("poisson", "constant")

# ShareGPT lengths as vLLM's benchmark samples them (benchmark_serving `sample_sharegpt_requests`:
# prompts of 4..1024 tokens, prompt + output <= 2048). The data set is not shipped; its lengths
# are heavy-tailed, modelled as log-normal with this shape (an assumption, not a fit) and scaled
# to the requested means.
SHAREGPT_SIGMA = 1.0
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048


@dataclass(frozen=True)
class Turn:
    new_segments: tuple[Segment, ...]
    max_tokens: int  # as sent; vLLM rejects prompt + max_tokens > max_model_len
    output_len: int  # tokens the model produces before it stops (<= max_tokens)
    think_time_s: float = 0.0  # pause after the previous answer before sending (0 for turn 1)


@dataclass(frozen=True)
class Session:
    turns: tuple[Turn, ...]
    keeps_history: bool = True


@dataclass(frozen=True)
class Workload:
    kind: str
    sessions: tuple[Session, ...]
    start_times_s: tuple[float, ...] | None  # open loop: session start times; None: closed loop
    max_concurrency: int | None  # sessions in flight at most; None: no limit
    description: str = ""
    # some segment appears in several sessions (a shared system prompt, a replayed message);
    # False when every session's text is its own (random, sharegpt)
    has_shared_segments: bool = True

    @property
    def num_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload as the user states it (CLI or bench flags); `build_workload` draws it."""

    kind: str
    num_prompts: int = 1000
    request_rate: float | None = None  # per second; None or inf: all at once
    max_concurrency: int | None = None
    burstiness: float = 1.0  # gamma shape of the inter-arrival times (1: Poisson)
    arrival: str = "poisson"  # or "constant": evenly spaced (inference-perf's constant load)
    input_len: int = 1024  # random: prompt tokens; sharegpt: mean
    output_len: int = 128  # tokens generated per request (sharegpt: mean)
    max_tokens: int | None = None  # as sent; default: the output length
    range_ratio: float = 0.0  # random/agent: lengths uniform in [L(1-r), L(1+r)]
    sessions: int = 10  # agent
    turns: int = 30
    system_prompt_tokens: int = 2000  # agent and shared-prefix: shared by every session/group
    user_tokens: int = 200  # agent: new user text per turn; shared-prefix: question length
    tool_output_tokens: int = 800  # agent: tool result appended before each turn after the first
    think_time_s: float = 2.0  # agent: mean pause between an answer and the next turn
    num_groups: int = 10  # shared-prefix: distinct system prompts
    prompts_per_group: int = 5  # shared-prefix: users per system prompt
    replay_path: str | None = None

    def validate(self) -> WorkloadSpec:
        if self.kind not in WORKLOAD_KINDS:
            raise UsageError(
                f"unknown workload {self.kind!r}; choose from: {', '.join(WORKLOAD_KINDS)}"
            )
        if self.arrival not in ARRIVALS:
            raise UsageError(
                f"unknown arrival {self.arrival!r}; choose from: {', '.join(ARRIVALS)}"
            )
        if self.request_rate is not None and not self.request_rate > 0:
            raise UsageError(f"--request-rate must be positive, got {self.request_rate}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UsageError(f"--max-concurrency must be at least 1, got {self.max_concurrency}")
        if not self.burstiness > 0:
            raise UsageError(f"--burstiness must be positive, got {self.burstiness}")
        if not 0 <= self.range_ratio < 1:
            raise UsageError(f"--range-ratio must be in [0, 1), got {self.range_ratio}")
        if self.think_time_s < 0:
            raise UsageError(f"--think-time-s must not be negative, got {self.think_time_s}")
        for name in (
            "num_prompts",
            "input_len",
            "output_len",
            "sessions",
            "turns",
            "num_groups",
            "prompts_per_group",
        ):
            if getattr(self, name) < 1:
                raise UsageError(
                    f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}"
                )
        for name in ("system_prompt_tokens", "user_tokens", "tool_output_tokens"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.kind == "replay" and not self.replay_path:
            raise UsageError("--workload replay needs a FILE.jsonl (--replay FILE)")
        return self


class SegmentIds:
    """Fresh segment ids (1, 2, 3...): each names new content."""

    def __init__(self) -> None:
        self._next = 1

    def new(self) -> int:
        value = self._next
        self._next += 1
        return value


def arrival_times(
    count: int,
    rate: float | None,
    rng: random.Random,
    *,
    burstiness: float = 1.0,
    arrival: str = "poisson",
) -> tuple[float, ...]:
    """Send times starting at 0: vLLM bench's gamma inter-arrivals (shape = burstiness, mean =
    1 / rate; shape 1 is Poisson), evenly spaced for "constant", all at 0 for no rate."""
    if rate is None or math.isinf(rate):
        return (0.0,) * count
    if arrival == "constant":
        return tuple(i / rate for i in range(count))
    times, now = [], 0.0
    for _ in range(count):
        times.append(now)
        now += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return tuple(times)


def _uniform_len(rng: random.Random, mean: int, ratio: float) -> int:
    if ratio <= 0:
        return mean
    return rng.randint(max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio))))


def _single_turn(prompt: tuple[Segment, ...], output_len: int, max_tokens: int | None) -> Session:
    sent_max = max(max_tokens or output_len, output_len)
    return Session((Turn(prompt, sent_max, output_len),), keeps_history=False)


def _random(spec: WorkloadSpec, rng: random.Random) -> list[Session]:
    ids = SegmentIds()
    sessions = []
    for _ in range(spec.num_prompts):
        prompt_len = _uniform_len(rng, spec.input_len, spec.range_ratio)
        output_len = _uniform_len(rng, spec.output_len, spec.range_ratio)
        sessions.append(_single_turn(((ids.new(), prompt_len),), output_len, spec.max_tokens))
    return sessions


def sharegpt_lengths(
    count: int, mean_input: float, mean_output: float, rng: random.Random
) -> list[tuple[int, int]]:
    """(prompt, output) pairs with log-normal lengths, vLLM's ShareGPT filter, and the given means."""
    pairs = [
        (rng.lognormvariate(0.0, SHAREGPT_SIGMA), rng.lognormvariate(0.0, SHAREGPT_SIGMA))
        for _ in range(count)
    ]
    scale_in = scale_out = 1.0
    lengths: list[tuple[int, int]] = []
    for _ in range(4):  # rescale, clip, and rescale again so the clipped means land on target
        lengths = [_sharegpt_clip(a * scale_in, b * scale_out) for a, b in pairs]
        scale_in *= mean_input / (sum(p for p, _ in lengths) / count)
        scale_out *= mean_output / (sum(o for _, o in lengths) / count)
    return lengths


def _sharegpt_clip(prompt: float, output: float) -> tuple[int, int]:
    prompt_len = min(max(4, round(prompt)), SHAREGPT_MAX_PROMPT)
    output_len = min(max(4, round(output)), SHAREGPT_MAX_TOTAL - prompt_len)
    return prompt_len, output_len


def _sharegpt(spec: WorkloadSpec, rng: random.Random) -> list[Session]:
    ids = SegmentIds()
    lengths = sharegpt_lengths(spec.num_prompts, spec.input_len, spec.output_len, rng)
    return [_single_turn(((ids.new(), p),), o, spec.max_tokens) for p, o in lengths]


def _agent(spec: WorkloadSpec, rng: random.Random) -> list[Session]:
    """Agent sessions: a system prompt shared by all, a task, then turns of tool output + text."""
    ids = SegmentIds()
    system = (ids.new(), spec.system_prompt_tokens)
    sessions = []
    for _ in range(spec.sessions):
        turns = []
        for index in range(spec.turns):
            segments: list[Segment] = [system] if index == 0 and spec.system_prompt_tokens else []
            if index > 0 and spec.tool_output_tokens:
                segments.append(
                    (ids.new(), _uniform_len(rng, spec.tool_output_tokens, spec.range_ratio))
                )
            if spec.user_tokens:
                segments.append((ids.new(), _uniform_len(rng, spec.user_tokens, spec.range_ratio)))
            output_len = _uniform_len(rng, spec.output_len, spec.range_ratio)
            think_s = (
                rng.expovariate(1.0 / spec.think_time_s) if index and spec.think_time_s else 0.0
            )
            sent_max = max(spec.max_tokens or output_len, output_len)
            turns.append(Turn(tuple(segments), sent_max, output_len, think_s))
        sessions.append(Session(tuple(turns), keeps_history=True))
    return sessions


def _shared_prefix(spec: WorkloadSpec, rng: random.Random) -> list[Session]:
    """inference-perf's shared_prefix: groups of users share a system prompt; every request is
    the group's system prompt plus a fresh question (requests assigned to users in turn)."""
    ids = SegmentIds()
    systems = [(ids.new(), spec.system_prompt_tokens) for _ in range(spec.num_groups)]
    num_users = spec.num_groups * spec.prompts_per_group
    sessions = []
    for index in range(spec.num_prompts):
        system = systems[(index % num_users) // spec.prompts_per_group]
        question = (ids.new(), _uniform_len(rng, spec.user_tokens, spec.range_ratio))
        output_len = _uniform_len(rng, spec.output_len, spec.range_ratio)
        prompt = (system, question) if spec.system_prompt_tokens else (question,)
        sessions.append(_single_turn(prompt, output_len, spec.max_tokens))
    return sessions


BUILDERS: dict[str, Callable[[WorkloadSpec, random.Random], list[Session]]] = {
    "random": _random,
    "sharegpt": _sharegpt,
    "agent": _agent,
    "shared-prefix": _shared_prefix,
}  # "replay" reads a file: kvwise.sim.replay


def build_workload(spec: WorkloadSpec, rng: random.Random) -> Workload:
    spec.validate()
    if spec.kind == "replay":
        from kvwise.sim.replay import load_replay

        assert spec.replay_path is not None
        return load_replay(spec.replay_path, spec)
    sessions = tuple(BUILDERS[spec.kind](spec, rng))
    starts: tuple[float, ...] | None
    concurrency: int | None
    if spec.kind == "agent" and spec.request_rate is None:
        # agent sessions run side by side: all start at once unless a rate or a cap is given
        starts, concurrency = None, spec.max_concurrency or len(sessions)
    elif spec.request_rate is None and spec.max_concurrency is not None:
        starts, concurrency = None, spec.max_concurrency
    else:
        starts = arrival_times(
            len(sessions), spec.request_rate, rng, burstiness=spec.burstiness, arrival=spec.arrival
        )
        concurrency = spec.max_concurrency
    shared = spec.kind not in ("random", "sharegpt")
    return Workload(spec.kind, sessions, starts, concurrency, describe(spec), shared)


def describe(spec: WorkloadSpec) -> str:
    load = f"{spec.request_rate:g}/s" if spec.request_rate else "all at once"
    if spec.max_concurrency:
        load += f", at most {spec.max_concurrency} in flight"
    if spec.kind == "agent":
        return (
            f"agent: {spec.sessions} sessions x {spec.turns} turns, system {spec.system_prompt_tokens}, "
            f"user {spec.user_tokens}, tool {spec.tool_output_tokens}, output {spec.output_len} tokens, "
            f"think {spec.think_time_s:g} s"
        )
    if spec.kind == "shared-prefix":
        return (
            f"shared-prefix: {spec.num_prompts} requests, {spec.num_groups} system prompts x "
            f"{spec.prompts_per_group} users, system {spec.system_prompt_tokens}, question "
            f"{spec.user_tokens}, output {spec.output_len} tokens, {load}"
        )
    if spec.kind == "replay":
        return f"replay {spec.replay_path}"
    return f"{spec.kind}: {spec.num_prompts} requests, input {spec.input_len}, output {spec.output_len} tokens, {load}"


def required_max_model_len(workload: Workload) -> int:
    """The longest request the workload sends: its final prompt plus max_tokens."""
    longest = 0
    for session in workload.sessions:
        history = 0
        for turn in session.turns:
            prompt = (history if session.keeps_history else 0) + sum(
                n for _, n in turn.new_segments
            )
            longest = max(longest, prompt + turn.max_tokens)
            history = prompt + turn.output_len
    return longest


def history_budget_tokens(
    workload: Workload, max_model_len: int, *, trim_history: bool = True
) -> int | None:
    """The budget kvwise's gateway trims session histories to on this deployment: the model's
    context once the workload's longest request outgrows it; None (sent whole, so vLLM rejects
    what does not fit) when nothing outgrows it or trimming is off. `simulate`, `plan
    --workload` and `bench --predict` all use this one rule."""
    if not trim_history or required_max_model_len(workload) <= max_model_len:
        return None
    return max_model_len
