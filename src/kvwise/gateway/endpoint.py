"""`/v1/chat/completions` and `/v1/completions`: admit, relay (streaming or not), fail over.

A request's life: authorize -> read the body (capped) -> prepare (validate, history, count) ->
admission (a lease on a replica, or a wait in the fair queue, or 429) -> relay -> store the turn
-> release the lease. The client is watched for disconnection the whole time; if it goes, the
work is cancelled, which closes the upstream connection (vLLM aborts the request when its client
goes) and releases the lease.

Failover: until the first token has been relayed, nothing has reached the client (a stream's
role-only first chunk is held back), so a replica that fails (connection refused or reset, a
5xx) is replaced by another one and the client never knows. After it, the stream ends with an
OpenAI-style error event instead of the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kvwise.gateway import internal_error, sse
from kvwise.gateway.admission import Lease, NoReplica, Overloaded, QueueShareExceeded
from kvwise.gateway.asgi import (
    BodyWriter,
    ClientGone,
    HttpError,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    send_error,
    send_response,
    wait_for_disconnect,
)
from kvwise.gateway.forwarding import forwarded_headers
from kvwise.gateway.prepare import PrepareContext, Prepared
from kvwise.gateway.replicas import Replica
from kvwise.gateway.security import Caller
from kvwise.gateway.server_limits import watch_disconnect
from kvwise.gateway.upstream_http import UpstreamConnectionError
from kvwise.gateway.upstream_stream import ReplicaFailed, UpstreamStream

if TYPE_CHECKING:
    from kvwise.gateway.app import Gateway

log = logging.getLogger("kvwise.gateway")

PrepareFn = Callable[[PrepareContext, bytes, "str | None", Caller], Awaitable[Prepared]]


class CompletionsEndpoint:
    def __init__(self, gateway: Gateway, prepare: PrepareFn) -> None:
        self.gateway = gateway
        self.prepare = prepare

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started_s = time.perf_counter()
        gateway = self.gateway
        try:
            caller = gateway.authorize(scope)
            gateway.tenants.enter(caller)  # the key's rate and concurrency limits
        except HttpError as exc:
            gateway.count_response(exc.status)
            await send_error(send, exc)
            return
        try:
            await self._serve(scope, receive, send, caller, started_s)
        finally:
            gateway.tenants.leave(caller)

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, caller: Caller, started_s: float
    ) -> None:
        gateway = self.gateway
        try:
            raw = await read_body(scope, receive, gateway.config.security.max_body_bytes)
            prepared = await self.prepare(
                gateway.prepare_context, raw, header(scope, b"x-session-id"), caller
            )
        except HttpError as exc:
            gateway.count_response(exc.status)
            await send_error(send, exc)
            return
        except ClientGone:
            return
        except RecursionError:  # a body parsed, but too deep for a later step to walk
            gateway.count_response(400)
            await send_error(send, HttpError(400, "request body is nested too deeply"))
            return
        except Exception as exc:
            error = internal_error.internal_error(gateway, scope, exc)
            await internal_error.answer(send, error, has_started_response=False)
            return
        exchange = Exchange(gateway, prepared, send, started_s, caller.name)
        exchange.upstream_headers = forwarded_headers(scope, gateway.upstream_headers)
        try:
            await self._run(exchange, receive, send)
        except Exception as exc:
            error = internal_error.internal_error(gateway, scope, exc)
            await internal_error.answer(send, error, exchange.has_started_response)

    async def _run(self, exchange: Exchange, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        # The exchange runs in this task (a task of its own would cost a pass of the event loop
        # on the TTFT path), cancelled if the client goes away first: seen by the gateway's
        # uvicorn protocol itself where it serves the request, else by a task waiting on
        # `receive`.
        task = asyncio.current_task()
        assert task is not None
        unwatch = watch_disconnect(send, lambda: _abandon(task, exchange))
        watcher = None
        if unwatch is None:
            watcher = asyncio.ensure_future(_cancel_when_gone(receive, task, exchange))
        try:
            await exchange.run()
        except asyncio.CancelledError:
            if not exchange.is_abandoned:
                raise  # the server is shutting down: not ours to swallow
            _uncancel(task)
            gateway.metrics.disconnects.inc()
        finally:
            if unwatch is not None:
                unwatch()
            if watcher is not None:
                watcher.cancel()


async def _cancel_when_gone(receive: Receive, task: asyncio.Task[Any], exchange: Exchange) -> None:
    await wait_for_disconnect(receive)
    _abandon(task, exchange)


def _abandon(task: asyncio.Task[Any], exchange: Exchange) -> None:
    """The client is gone."""
    if not exchange.is_done:  # the task is suspended inside exchange.run(): stop it there
        exchange.is_abandoned = True
        task.cancel()


def _uncancel(task: asyncio.Task[Any]) -> None:
    """Python >= 3.11 counts cancellations; this one was handled (3.10 has no count)."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()


class Exchange:
    """One admitted request and its (possibly replaced) upstream."""

    def __init__(
        self, gateway: Gateway, prepared: Prepared, send: Send, started_s: float, key_name: str
    ) -> None:
        self.gateway = gateway
        self.key_name = key_name  # the API key's name, for per-key metrics
        self.generated_tokens: int | None = None  # as the reply shows, once it is complete
        self.prepared = prepared
        self.send = send
        self.started_s = started_s
        self.lease: Lease | None = None
        self.upstream_headers = gateway.upstream_headers
        self.queue_wait_s = 0.0
        self.sent_upstream_s = started_s
        self.tried: list[Replica] = []
        self.has_started_response = False
        self.is_done = False  # run() has returned
        self.is_abandoned = False  # the client went away while run() was under way

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.is_done = True

    async def _run(self) -> None:
        asked_s = time.perf_counter()
        try:
            self.lease = await self.gateway.admission.acquire(self.prepared.ticket)
            self.queue_wait_s = time.perf_counter() - asked_s
        except Overloaded as exc:
            is_share = isinstance(exc, QueueShareExceeded)
            self.gateway.tenants.count(
                self.key_name, "queue_share_limited" if is_share else "queue_full"
            )
            retry_after = {"retry-after": str(exc.retry_after_s)}
            message = f"server busy ({exc.reason}); retry later"
            await self._fail(HttpError(429, message, "rate_limit_exceeded", headers=retry_after))
            return
        except NoReplica as exc:
            # a replica (or the shared admission store) can be back a fraction of a second away
            retry_after = {"retry-after": "1"}
            message = str(exc) or "no healthy replica"
            error = HttpError(503, message, "service_unavailable", headers=retry_after)
            await self._fail(error)
            return
        self.gateway.tenants.count(self.key_name, "admitted")
        try:
            if self.prepared.is_stream:
                await self._relay_stream()
            else:
                await self._relay_whole()
        except HttpError as exc:
            await self._fail(exc)
        finally:
            self.gateway.admission.router.done(id(self.prepared.ticket))
            self.lease.release()
            self.gateway.admission.record_service_time(time.perf_counter() - self.started_s)
            self._charge_served()

    def _charge_served(self) -> None:
        """KV tokens the request held (prompt + generated): the fair queue's correction of the
        reservation it charged, and the key's count in /metrics. A reply cut short or failed
        keeps the whole reservation charged."""
        ticket = self.prepared.ticket
        served = ticket.cost_tokens
        if self.generated_tokens is not None:
            served = min(served, ticket.prompt_tokens + self.generated_tokens)
        self.gateway.admission.finish(ticket, served if self.generated_tokens is not None else None)
        self.gateway.tenants.served_kv_tokens[self.key_name] += served

    async def _fail(self, error: HttpError) -> None:
        self.gateway.count_response(error.status)
        await send_error(self.send, error)

    def _url(self) -> str:
        assert self.lease is not None
        return self.lease.replica.url + self.prepared.path

    async def _failover(self, reason: str, is_replica_down: bool) -> bool:
        """Move the lease to another replica; False when none is left to try."""
        assert self.lease is not None
        failed = self.lease.replica
        log.warning("replica %s failed (%s); failing over", failed.name, reason)
        if is_replica_down:
            self.gateway.mark_down(failed)
        self.tried.append(failed)
        self.lease.release()
        try:
            self.lease = await self.gateway.admission.acquire(
                self.prepared.ticket, exclude=self.tried
            )
        except (Overloaded, NoReplica):
            return False
        self.gateway.admission.refund(self.prepared.ticket)
        self.gateway.metrics.failovers.inc()
        return True

    async def _relay_whole(self) -> None:
        while True:
            try:
                response = await self.gateway.upstream.post(
                    self._url(), self.prepared.body, self.upstream_headers
                )
                try:
                    body = await response.read()
                finally:
                    response.close()
            except UpstreamConnectionError as exc:
                if await self._failover(str(exc), is_replica_down=True):
                    continue
                raise HttpError(502, f"upstream failed: {exc}", "upstream_error") from None
            if response.status >= 500 and await self._failover(f"HTTP {response.status}", False):
                continue
            break
        if response.status >= 500:
            message = f"upstream answered {response.status} and no other replica could"
            raise HttpError(502, message, "upstream_error")
        if response.status == 200:
            payload = _json_or_none(body)
            self.generated_tokens = _completion_tokens(payload)
            is_stored = self.prepared.turn is not None and isinstance(payload, dict)
            reply = sse.reply_of_response(payload) if is_stored else None
            if reply is not None and self.prepared.turn is not None:
                await self.gateway.store_turn(self.prepared.turn, reply)
        self._record_latency(response.status)
        content_type = response.headers.get("content-type", "application/json").encode()
        await send_response(self.send, response.status, body, content_type, self._headers())

    def _headers(self) -> dict[str, str]:
        assert self.lease is not None
        return {**self.prepared.response_headers, "x-kvwise-replica": self.lease.replica.name}

    def _record_latency(self, status: int) -> None:
        assert self.lease is not None
        elapsed_s = time.perf_counter() - self.started_s
        self.gateway.metrics.upstream_latency.observe(elapsed_s, self.lease.replica.name)
        self.gateway.count_response(status)

    async def _relay_stream(self) -> None:
        while True:
            self.sent_upstream_s = time.perf_counter()
            try:
                stream = await UpstreamStream.open(
                    self.gateway.upstream,
                    self._url(),
                    self.prepared.body,
                    self.upstream_headers,
                    self.gateway.config.stall_timeout_s,
                )
            except ReplicaFailed as exc:
                if await self._failover(str(exc), is_replica_down="HTTP" not in str(exc)):
                    continue
                raise HttpError(502, f"upstream failed: {exc}", "upstream_error") from None
            break
        try:
            if stream.response.status != 200:
                body = await stream.response.read()
                self._record_latency(stream.response.status)
                content_type = stream.response.headers.get(
                    "content-type", "application/json"
                ).encode()
                await send_response(
                    self.send, stream.response.status, body, content_type, self._headers()
                )
                return
            await StreamRelay(self, stream).run()
        finally:
            stream.response.close()


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # not JSON (an upstream's own error page): relayed as it is
        return None


def _completion_tokens(payload: Any) -> int | None:
    """`usage.completion_tokens` of an OpenAI response, when it has one."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and tokens >= 0 else None


DONE_EVENT = sse.DONE + b"\n\n"


def _is_token_event(event: bytes) -> bool:
    """An event that counts for the token timing metrics (past the first token, without
    parsing it): a JSON chunk, but not the usage-only one that can close a stream."""
    return event.startswith(b"data: {") and not sse.is_usage_only(event)


class StreamRelay:
    """Relays events to the client as they complete; stores the turn before the final [DONE]."""

    def __init__(self, exchange: Exchange, stream: UpstreamStream) -> None:
        self.exchange = exchange
        self.stream = stream
        self.collector = sse.ReplyCollector() if exchange.prepared.turn is not None else None
        self.is_stored = False
        self.is_complete = False
        self.num_token_events = 0
        self.first_token_s: float | None = None
        self.last_token_s = 0.0
        # the stream's last events ([DONE], and what came with it or with the upstream's
        # last chunk), relayed with the response's end: one write (one TCP segment) for both
        self.last_events = b""

    async def run(self) -> None:
        exchange, gateway = self.exchange, self.exchange.gateway
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
                   (b"x-accel-buffering", b"no")]  # fmt: skip
        headers += [(k.encode(), v.encode()) for k, v in exchange._headers().items()]
        held, index = self.stream.held, self.stream.first_token_index
        writer = None
        is_whole = False  # the response ended with the write that starts it
        if self.collector is None and index is not None:  # no turn to store before [DONE]
            # the head and the events held back in one write, one TCP segment (uvicorn's
            # `send` writes them in two), and no event parsed again to count it; the end of
            # the response too when the upstream's body ended in what was read (a short reply)
            is_whole, first = self.stream.has_read_all(), held
            if not is_whole and held[-1] == DONE_EVENT:  # the end follows: they leave together
                first, self.last_events = held[:-1], held[-1]
            writer = BodyWriter.start(exchange.send, 200, headers, b"".join(first), is_whole)
            if writer is None:
                is_whole, self.last_events = False, b""  # `send` relays them all, below
        if writer is not None and index is not None:
            exchange.has_started_response = True
            self._count_held(held, index, time.perf_counter())
        else:
            await exchange.send({"type": "http.response.start", "status": 200, "headers": headers})
            exchange.has_started_response = True
            await self._forward(held)
        self._record_overhead()
        try:
            if not self.stream.is_finished:
                await self._relay_rest(writer)
            tail = self.stream.splitter.rest()
            if tail:
                await self._send_last_events()
                await self._forward([tail])
            if not self.is_stored:  # an upstream that ends its stream without [DONE]
                await self._store_turn()
            self.is_complete = True
        except HttpError as exc:  # the turn could not be stored: no [DONE], an error instead
            await self._send_last_events()
            event = sse.error_event(exc.message, exc.error_type, exc.status)
            await exchange.send({"type": "http.response.body", "body": event, "more_body": True})
        except UpstreamConnectionError as exc:
            await self._send_last_events()
            assert exchange.lease is not None
            gateway.mark_down(exchange.lease.replica)
            message = f"replica {exchange.lease.replica.name} failed mid-stream ({exc})"
            await exchange.send(
                {"type": "http.response.body", "body": sse.error_event(message), "more_body": True}
            )
            gateway.metrics.broken_streams.inc()
        body, self.last_events = self.last_events, b""
        if not is_whole:
            await exchange.send({"type": "http.response.body", "body": body, "more_body": False})
        if self.is_complete:
            exchange.generated_tokens = self.num_token_events  # one token per chunk and choice
        exchange._record_latency(200)
        self._record_token_times()

    async def _relay_rest(self, writer: BodyWriter | None) -> None:
        """Every chunk after the first token's. Past the first token, with no reply to store,
        a read's complete events go out as one write, counted for the metrics without being
        split or parsed: most chunks take this path, and most of those go from the upstream
        connection's `data_received` straight to the client's transport (`pipe_body`), no
        task resumed. The loop below takes what that does not: a slow client (uvicorn holds
        writes back), a reply to store, another server than uvicorn's httptools one."""
        chunks, splitter, send = self.stream.chunks, self.stream.splitter, self.exchange.send
        is_plain = self.collector is None and self.first_token_s is not None
        perf_counter, count_token_events = time.perf_counter, sse.count_token_events
        writer = writer or BodyWriter.of(send)
        # the benchmark's other HTTP clients (benchmarks/gateway_variant.py) have no pipe_body
        pipe_body = getattr(self.stream.response, "pipe_body", None) if writer else None
        deliver = self._deliverer(writer) if writer is not None else None
        while True:
            if is_plain and pipe_body is not None and writer is not None and writer.is_open():
                await pipe_body(writer.is_open, deliver, self._hold_last)
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            if not is_plain:
                await self._forward(splitter.feed(chunk))
                is_plain = self.collector is None and self.first_token_s is not None
                continue
            events = splitter.feed_joined(chunk)
            if not events:
                continue
            await self._send_last_events()  # what the pipe held goes first
            num_token_events = count_token_events(events)
            if num_token_events:
                self.num_token_events += num_token_events
                self.last_token_s = perf_counter()
            if writer is None or not writer.write(events):
                await send({"type": "http.response.body", "body": events, "more_body": True})

    def _deliverer(self, writer: BodyWriter) -> Callable[[bytes, bytes | None], None]:
        """What `pipe_body` hands each read's body bytes to (the client's transport is open):
        their complete events counted and written; `raw`, the chunk as read, goes out as it
        is when it holds exactly those events."""
        feed_joined, count_token_events = self.stream.splitter.feed_joined, sse.count_token_events
        write_chunks, perf_counter = writer.write_chunks, time.perf_counter

        def deliver(piece: bytes, raw: bytes | None) -> None:
            events = feed_joined(piece)
            if not events:
                return
            num_token_events = count_token_events(events)
            if num_token_events:
                self.num_token_events += num_token_events
                self.last_token_s = perf_counter()
            if self.last_events or events.endswith(DONE_EVENT):
                # the stream's last event: it leaves with the end of the response, which the
                # engine sends right after it (`run`)
                self.last_events += events
                return
            write_chunks(raw if raw is not None and events is piece else
                         b"%x\r\n%b\r\n" % (len(events), events))  # fmt: skip

        return deliver

    def _hold_last(self, piece: bytes) -> None:
        """The body bytes read with the upstream's last chunk, on the pipe: counted, and kept
        for the write that ends the response (`run`)."""
        events = self.stream.splitter.feed_joined(piece)
        if events:
            num_token_events = sse.count_token_events(events)
            if num_token_events:
                self.num_token_events += num_token_events
                self.last_token_s = time.perf_counter()
            self.last_events += events

    async def _send_last_events(self) -> None:
        if self.last_events:
            body, self.last_events = self.last_events, b""
            await self.exchange.send(
                {"type": "http.response.body", "body": body, "more_body": True}
            )

    async def _forward(self, events: list[bytes]) -> None:
        if not events:
            return
        now_s = time.perf_counter()
        is_last = any(sse.is_done(event) for event in events)
        if is_last:  # the turn is stored from every chunk before [DONE] reaches the client
            self._observe_all(events, now_s)
            await self._store_turn()
        await self.exchange.send(
            {"type": "http.response.body", "body": b"".join(events), "more_body": True}
        )
        if not is_last:  # after the send: parsing the chunks is not on the client's path
            self._observe_all(events, now_s)

    def _count_held(self, held: list[bytes], index: int, now_s: float) -> None:
        """`_observe_all(held)` for a stream whose first token is `held[index]` (known from
        reading up to it) and no reply to store: nothing parsed a second time."""
        self._first_token(now_s)
        self.num_token_events += sum(_is_token_event(event) for event in held[index + 1 :])

    def _observe_all(self, events: list[bytes], now_s: float) -> None:
        for event in events:
            if _is_token_event(event):
                self._observe(event, now_s)

    def _record_overhead(self) -> None:
        """The gateway's own time on the TTFT path: request in -> request out (queue wait
        excluded) plus first token in -> first token out."""
        exchange, read_s = self.exchange, self.stream.first_token_read_s
        if read_s is None:
            return
        before_s = exchange.sent_upstream_s - exchange.started_s - exchange.queue_wait_s
        after_s = time.perf_counter() - read_s
        exchange.gateway.metrics.ttft_overhead.observe(before_s + after_s)

    async def _store_turn(self) -> None:
        """Before [DONE] reaches the client: an acknowledged turn is a stored turn."""
        turn = self.exchange.prepared.turn
        if self.collector is not None and turn is not None and not self.is_stored:
            self.is_stored = True
            await self.exchange.gateway.store_turn(turn, self.collector.message())

    def _observe(self, event: bytes, now_s: float) -> None:
        if self.collector is not None:
            payload = sse.event_json(event)
            if payload is not None:
                self.collector.add_chunk(payload)
        if self.first_token_s is None:
            payload = sse.event_json(event)
            if payload is None or not sse.carries_token(payload):
                return
            self._first_token(now_s)
            return
        self.num_token_events += 1
        self.last_token_s = now_s

    def _first_token(self, now_s: float) -> None:
        exchange = self.exchange
        self.first_token_s = self.last_token_s = now_s
        self.num_token_events += 1
        exchange.gateway.metrics.ttft.observe(now_s - exchange.started_s)
        exchange.gateway.admission.router.first_token(
            id(exchange.prepared.ticket), now_s - exchange.sent_upstream_s
        )

    def _record_token_times(self) -> None:
        if self.first_token_s is not None and self.num_token_events > 1:
            tpot_s = (self.last_token_s - self.first_token_s) / (self.num_token_events - 1)
            self.exchange.gateway.metrics.tpot.observe(tpot_s)
