"""An upstream SSE response held back until its first token: the point before which a
failed replica can still be replaced without the client noticing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from kvwise.gateway import sse
from kvwise.gateway.upstream_http import UpstreamClient, UpstreamConnectionError, UpstreamResponse


class ReplicaFailed(Exception):
    """The replica could not serve this request (connection failure or 5xx)."""


class UpstreamStream:
    """An upstream SSE response, read up to its first token (or its end) before anything is sent."""

    def __init__(self, response: UpstreamResponse) -> None:
        self.response = response
        self.chunks: AsyncIterator[bytes] = response.iter_raw()
        self.splitter = sse.EventSplitter()
        self.held: list[bytes] = []  # events read before the first token
        self.is_finished = False
        self.first_token_read_s: float | None = None
        self.first_token_index: int | None = None  # in `held`: the event that carries it

    @classmethod
    async def open(
        cls,
        client: UpstreamClient,
        url: str,
        body: bytes,
        headers: dict[str, str],
        stall_timeout_s: float,
    ) -> UpstreamStream:
        """`stall_timeout_s`: the longest silence before the head and between chunks."""
        try:
            response = await client.post(url, body, headers, stall_timeout_s)
        except UpstreamConnectionError as exc:
            raise ReplicaFailed(str(exc)) from None
        if response.status >= 500:
            response.close()
            raise ReplicaFailed(f"HTTP {response.status}")
        stream = cls(response)
        if response.status == 200:
            try:
                await stream._read_to_first_token()
            except UpstreamConnectionError as exc:
                response.close()
                raise ReplicaFailed(f"{exc} before the first token") from None
        return stream

    def has_read_all(self) -> bool:
        """The upstream's body has ended (its last chunk read) and every event of it is in
        `held`: nothing more to relay."""
        is_last = getattr(self.response, "is_last_chunk_read", False)  # others: not known
        return bool(is_last) and not self.splitter.has_pending()

    async def _read_to_first_token(self) -> None:
        async for chunk in self.chunks:
            events = self.splitter.feed(chunk)
            self.held += events  # all of them: one read can bring the first token and more
            for index, event in enumerate(events, len(self.held) - len(events)):
                if sse.is_done(event):
                    self.first_token_read_s = time.perf_counter()
                    return
                payload = sse.event_json(event)
                if payload is not None and sse.carries_token(payload):
                    self.first_token_read_s = time.perf_counter()
                    self.first_token_index = index
                    return
        self.is_finished = True
