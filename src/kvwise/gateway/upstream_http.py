"""The gateway's one HTTP client to its engines: the relay, the health probes, the /metrics
scrapes, /v1/models, and the engine's limits at start. HTTP/1.1 over asyncio, TLS by `ssl`.

Why not a library here: measured side by side in one run (`benchmarks/gateway_overhead.py`,
figures in `benchmarks/results/gateway_overhead.txt`), aiohttp cost the gateway about 1.5x the
CPU per relayed chunk of this client and added more to TTFT, httpx about 3x (its pool scans
every pooled connection on each request); vllm-router, the Rust reference, sits below all.
This client does only what the relay needs:

* keep-alive connections per upstream, `Content-Length` and chunked bodies, TCP_NODELAY;
* TLS for https:// upstreams with certificate and host-name verification against the system's
  store (OpenSSL's default paths, which `SSL_CERT_FILE` / `SSL_CERT_DIR` override) or exactly
  the CA file of `--upstream-ca` (as curl's `--cacert`), by the standard library's `ssl`;
* a connect timeout, and a read timeout that bounds each silence (before the response head,
  between body reads), not the whole stream;
* one exception type (`UpstreamConnectionError`) for everything that means "this replica
  failed", with a one-line reason (an untrusted certificate names its fix).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from kvwise.errors import UsageError

_Key = tuple[str, int, bool]  # host, port, TLS
MAX_IDLE_PER_UPSTREAM = 256
MAX_HEAD_BYTES = 64 * 1024
MAX_READ_BYTES = 64 * 1024
MAX_BUFFERED_BYTES = 128 * 1024  # unread bytes past which the connection stops reading


class UpstreamConnectionError(Exception):
    """Connecting, writing or reading failed, or the answer was not HTTP."""


class UpstreamTimeout(UpstreamConnectionError):
    """Connecting or reading took longer than its timeout: a busy server, or a dead one."""


class ReplicaAborted(UpstreamConnectionError):
    """The replica was marked down while this request waited for its answer."""


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Verifying certificates and host names: against `ca_file` alone when given, else the
    system's store (OpenSSL's default paths, which `SSL_CERT_FILE` / `SSL_CERT_DIR` override)."""
    if ca_file is not None and not Path(ca_file).is_file():
        raise UsageError(f"--upstream-ca {ca_file}: no such file")
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:
        raise UsageError(f"--upstream-ca {ca_file}: not a PEM certificate file ({exc})") from None


def _connect_error(exc: OSError, host: str, port: int) -> UpstreamConnectionError:
    """One line for a failed connect or TLS handshake; an untrusted certificate names its fix."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return UpstreamConnectionError(
            f"TLS certificate of {host}:{port} not trusted ({exc.verify_message}); give its CA "
            "with --upstream-ca FILE or SSL_CERT_FILE"
        )
    if isinstance(exc, ssl.SSLError):
        return UpstreamConnectionError(f"TLS with {host}:{port} failed ({exc.reason or exc})")
    reason = exc.strerror or type(exc).__name__
    return UpstreamConnectionError(f"cannot connect to {host}:{port}: {reason}")


class _StaleConnection(UpstreamConnectionError):
    """A kept-alive connection was closed by the server before it answered anything."""


class _Connection(asyncio.Protocol):
    """A kept-alive upstream connection whose reads time out after `read_timeout_s`.

    The protocol buffers what arrives itself and wakes the one reader waiting: no
    StreamReader, whose layers (feed, wake-up, read, wait) cost Python calls on every SSE event
    the relay forwards. Reading pauses while `MAX_BUFFERED_BYTES` wait unread.

    One timer per connection, re-armed lazily, rather than one per read: each wait only moves a
    deadline, and the timer, when it fires, aborts the connection if a read has been waiting
    past its deadline, else sleeps until the new one.
    """

    def __init__(self, read_timeout_s: float) -> None:
        self.read_timeout_s = read_timeout_s
        self.is_reused = False
        self.timed_out = False
        self.is_aborted = False  # by abort_waiting(): the replica was marked down
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray()
        self._is_eof = False  # the server closed its side, or the connection was lost
        self._error: Exception | None = None
        self._is_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._deadline_s = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.lost: asyncio.Future[None] = self._loop.create_future()  # the transport is gone
        # while set, what arrives goes to pipe(data) instead of the buffer, unless it returns
        # False (see UpstreamResponse.pipe_body)
        self.pipe: Callable[[bytes], bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")  # under TLS too: the TCP socket beneath
        if sock is not None:  # asyncio and uvloop set it already; a request is one write
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def set_read_timeout(self, read_timeout_s: float) -> None:
        """For the next exchange. The lazy timer only ever moves its deadline later: a shorter
        timeout than the one it was armed with needs a new timer."""
        if read_timeout_s < self.read_timeout_s and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.read_timeout_s = read_timeout_s

    def data_received(self, data: bytes) -> None:
        pipe = self.pipe
        if pipe is not None:  # UpstreamResponse.pipe_body(): the bytes go on from here
            self._deadline_s = self._loop.time() + self.read_timeout_s
            if pipe(data):
                return
            self.pipe = None  # declined: buffered for the reader, whom the waiter below wakes
        self._buffer += data
        if len(self._buffer) > MAX_BUFFERED_BYTES and not self._is_paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self._is_paused = True
        waiter = self._waiter  # _wake(), inlined: this runs once per SSE event
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> None:
        self._is_eof = True
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._is_eof = True
        self._error = exc
        self._wake()
        if not self.lost.done():
            self.lost.set_result(None)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def is_closed(self) -> bool:
        return self._is_eof or self.transport is None or self.transport.is_closing()

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def read_head(self) -> bytes:
        """Up to and including the blank line that ends a response head."""
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ValueError("response head too large")
            await self._more()
        head = bytes(self._buffer[: end + 4])
        del self._buffer[: end + 4]
        return head

    async def read_some(self, max_bytes: int) -> bytes:
        """What has arrived (at most `max_bytes`), waiting if nothing has; b"" at the end."""
        while (data := self.take(max_bytes)) is None:
            await self._more()
        return data

    def take(self, max_bytes: int) -> bytes | None:
        """What has arrived (at most `max_bytes`); b"" at the end; None when nothing has yet
        (then wait on `_more()`). A plain function: a reader that awaits `_more()` itself
        is resumed without one more coroutine frame per SSE event."""
        if not self._buffer:
            if self._is_eof:
                if self._error is not None:
                    raise self._error
                return b""
            return None
        if len(self._buffer) <= max_bytes:
            data = bytes(self._buffer)
            self._buffer.clear()
        else:
            data = bytes(self._buffer[:max_bytes])
            del self._buffer[:max_bytes]
        if self._is_paused and len(self._buffer) <= MAX_BUFFERED_BYTES // 2:
            assert self.transport is not None
            self.transport.resume_reading()
            self._is_paused = False
        return data

    def _more(self) -> asyncio.Future[None]:
        """Resolved when more bytes arrive or the connection ends (a plain function, not a
        coroutine: one frame less per SSE event). A lost connection raises its error."""
        if self._error is not None:
            raise self._error
        if self._is_eof:
            raise asyncio.IncompleteReadError(bytes(self._buffer), None)
        self._deadline_s = self._loop.time() + self.read_timeout_s
        if self._timer is None:
            self._timer = self._loop.call_at(self._deadline_s, self._check_deadline)
        self._waiter = self._loop.create_future()
        return self._waiter

    def _check_deadline(self) -> None:
        self._timer = None
        if self._waiter is None or self._waiter.done():
            return  # between reads, or idle in the pool: the next read arms a timer again
        if self._loop.time() >= self._deadline_s:
            self.timed_out = True
            assert self.transport is not None
            self.transport.abort()
        else:
            self._timer = self._loop.call_at(self._deadline_s, self._check_deadline)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()


@dataclass
class UpstreamResponse:
    status: int
    headers: dict[str, str]
    _connection: _Connection
    _client: UpstreamClient
    _key: _Key
    _is_consumed: bool = False
    _is_closed: bool = field(default=False)
    # chunked bodies: bytes of a chunk not yet complete, and whether the last chunk was seen
    # (here, not in iter_raw's locals: pipe_body() decodes the same body between its reads)
    _pending: bytes = b""
    _is_last: bool = False

    @property
    def is_last_chunk_read(self) -> bool:
        """A chunked body's last chunk has been read (its pieces yielded or delivered)."""
        return self._is_last

    @property
    def is_chunked(self) -> bool:
        return self.headers.get("transfer-encoding", "").lower() == "chunked"

    async def iter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked transfer decoded), then the connection goes back.

        One generator, reading the connection directly: the streaming relay resumes it once
        per SSE event, and every layer between costs on each."""
        connection = self._connection
        try:
            if self.is_chunked:
                # every complete chunk in a read at once: one relay `send` for a burst of events
                while not self._is_last:
                    while (data := connection.take(MAX_READ_BYTES)) is None:
                        await connection._more()
                    if not data:
                        raise asyncio.IncompleteReadError(self._pending, None)
                    pending = self._pending
                    pieces, self._pending, self._is_last = _decode_chunks(
                        pending + data if pending else data
                    )
                    if pieces:
                        yield b"".join(pieces)
            else:
                remaining = int(self.headers.get("content-length", "0"))
                while remaining > 0:
                    piece = await connection.read_some(min(remaining, MAX_READ_BYTES))
                    if not piece:
                        raise asyncio.IncompleteReadError(b"", remaining)
                    remaining -= len(piece)
                    yield piece
            self._is_consumed = True
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            if connection.timed_out:
                raise UpstreamTimeout("timed out while reading the body") from None
            raise UpstreamConnectionError(f"{type(exc).__name__} while reading the body") from None

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.iter_raw()])

    async def pipe_body(
        self,
        is_open: Callable[[], bool],
        deliver: Callable[[bytes, bytes | None], None],
        deliver_last: Callable[[bytes], None] | None = None,
    ) -> bool:
        """A chunked body's next pieces handed on from the connection's `data_received`, as
        they arrive: no task resumed, no future made per read. While `is_open()`, each read's
        complete chunks go to `deliver(piece, raw)`, `raw` being the bytes read when they are
        exactly the one chunk that carries `piece` (they can then be relayed as they are),
        else None; the piece read with the last chunk goes to `deliver_last(piece)` instead
        when given (its relay can end the response in the same write). The read timeout
        bounds each silence, as for `iter_raw`.

        Returns True once the last chunk is in (`iter_raw` then ends at once), False when it
        stops before: `is_open()` said no, the bytes were not chunked, the connection ended or
        failed, bytes were already waiting, or `deliver` raised (which this re-raises).
        The caller then goes on with `iter_raw`, which reads what was not delivered and raises
        what the connection's end means."""
        connection = self._connection
        if self._is_last or connection._buffer or not self.is_chunked:
            return self._is_last
        try:
            waiter = connection._more()  # arms the read timer
        except Exception:
            return False  # the connection ended or failed: iter_raw raises what it means
        failure: list[BaseException] = []

        def pipe(data: bytes) -> bool:
            if not is_open():
                return False
            pending, raw, is_last = self._pending, None, False
            if not pending and data.endswith(b"\r\n"):  # the usual read: one whole chunk
                line_end = data.find(b"\r\n")
                try:
                    size = int(data[:line_end], 16)
                except ValueError:  # an extension, or not chunked: the general case says
                    size = 0
                if size and line_end + 4 + size == len(data):
                    piece, raw = data[line_end + 2 : -2], data
            if raw is None:
                try:
                    pieces, rest, is_last = _decode_chunks(pending + data if pending else data)
                except ValueError:
                    return False  # not chunked as it should be: iter_raw says so
                self._pending, self._is_last = rest, is_last
                piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            try:
                if piece:
                    if is_last and deliver_last is not None:
                        deliver_last(piece)
                    else:
                        deliver(piece, raw)
            except Exception as exc:  # for the relay to raise, not the event loop to log
                failure.append(exc)
                is_last = True
            if is_last:
                connection.pipe = None
                if not waiter.done():
                    waiter.set_result(None)
            return True

        connection.pipe = pipe
        try:
            await waiter
        finally:
            connection.pipe = None
            connection._waiter = None
        if failure:
            raise failure[0]
        return self._is_last

    def close(self) -> None:
        """Back to the pool when the body was read to its end, else the connection is dropped."""
        if self._is_closed:
            return
        self._is_closed = True
        keep = self._is_consumed and self.headers.get("connection", "").lower() != "close"
        self._client.put_back(self._key, self._connection, keep)


class UpstreamClient:
    def __init__(
        self, connect_timeout_s: float, read_timeout_s: float, ca_file: str | None = None
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.tls = tls_context(ca_file)
        self._idle: defaultdict[_Key, list[_Connection]] = defaultdict(list)
        self._targets: dict[str, tuple[_Key, str, str]] = {}  # url -> parsed, reused
        # connections with a request sent and no response head yet, per server
        self._waiting: defaultdict[_Key, set[_Connection]] = defaultdict(set)
        self._is_closed = False
        self._live: set[_Connection] = set()  # every connection not yet lost, pooled or busy

    def _target(self, url: str) -> tuple[_Key, str, str]:
        """(host, port, TLS), path and netloc of a URL: a gateway posts to a handful of URLs."""
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            is_tls = parts.scheme == "https"
            key = (parts.hostname or "127.0.0.1", parts.port or (443 if is_tls else 80), is_tls)
            path = parts.path or "/"
            target = self._targets[url] = (
                key,
                f"{path}?{parts.query}" if parts.query else path,
                parts.netloc,
            )
        return target

    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        read_timeout_s: float | None = None,
    ) -> UpstreamResponse:
        """Send the request and read the response head; the body is read by the caller.
        `read_timeout_s`: the longest silence (before the head, between reads) for this one."""
        return await self._request("POST", url, body, headers, read_timeout_s)

    async def get(
        self, url: str, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> UpstreamResponse:
        return await self._request("GET", url, b"", headers or {}, timeout_s)

    async def get_body(
        self, url: str, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        """Status and whole body of a GET, within `timeout_s` in all (probes, scrapes)."""

        async def get() -> tuple[int, bytes]:
            response = await self.get(url, headers, timeout_s)
            try:
                return response.status, await response.read()
            finally:
                response.close()

        try:
            return await asyncio.wait_for(get(), timeout_s or self.read_timeout_s)
        except asyncio.TimeoutError:
            raise UpstreamTimeout(f"no answer from {url} in time") from None

    def abort_waiting(self, url: str) -> int:
        """Abort the requests to `url`'s server still waiting for a response head (the replica
        was marked down): they fail with ReplicaAborted and can go elsewhere. How many."""
        key, _, _ = self._target(url)
        waiting = self._waiting.pop(key, set())
        for connection in waiting:
            connection.is_aborted = True
            if connection.transport is not None:
                connection.transport.abort()
        return len(waiting)

    async def _request(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: dict[str, str],
        read_timeout_s: float | None = None,
    ) -> UpstreamResponse:
        key, path, netloc = self._target(url)
        head = [f"{method} {path} HTTP/1.1", f"host: {netloc}"]
        if body or method != "GET":
            head.append(f"content-length: {len(body)}")
        head += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        timeout_s = read_timeout_s or self.read_timeout_s
        connection = await self._connection(key)
        try:
            return await self._exchange(key, connection, request, timeout_s)
        except _StaleConnection:
            if not connection.is_reused:
                raise
        # The server had closed the idle connection: it processed nothing, so send again.
        return await self._exchange(key, await self._connect(key), request, timeout_s)

    async def _exchange(
        self, key: _Key, connection: _Connection, request: bytes, timeout_s: float
    ) -> UpstreamResponse:
        connection.set_read_timeout(timeout_s)
        waiting = self._waiting[key]
        waiting.add(connection)
        try:
            connection.write(request)  # a write that fails is seen by the read that follows
            status, headers = await _read_head(connection)
        except UpstreamConnectionError:
            if connection.is_aborted:
                raise ReplicaAborted("the replica was marked down") from None
            raise
        finally:
            waiting.discard(connection)
        return UpstreamResponse(status, headers, connection, self, key)

    async def _connection(self, key: _Key) -> _Connection:
        idle = self._idle[key]
        while idle:
            connection = idle.pop()
            if not connection.is_closed:
                connection.is_reused = True
                return connection
            connection.close()
        return await self._connect(key)

    async def _connect(self, key: _Key) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port, is_tls = key
        connect = loop.create_connection(
            lambda: _Connection(self.read_timeout_s),
            host,
            port,
            ssl=self.tls if is_tls else None,
            server_hostname=host if is_tls else None,
        )
        try:
            transport, connection = await asyncio.wait_for(connect, self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise UpstreamTimeout("cannot connect: TimeoutError") from None
        except OSError as exc:
            raise _connect_error(exc, host, port) from None
        connection.transport = transport  # uvloop calls connection_made() only after this
        self._live.add(connection)
        connection.lost.add_done_callback(lambda _: self._live.discard(connection))
        return connection

    def put_back(self, key: _Key, connection: _Connection, keep: bool) -> None:
        # a response that ends after the client closed (a relay finishing during shutdown) must
        # not park its connection in a pool nobody will close
        if keep and not self._is_closed and len(self._idle[key]) < MAX_IDLE_PER_UPSTREAM:
            self._idle[key].append(connection)
        else:
            connection.close()

    def close(self) -> list[_Connection]:
        """The pooled connections closed (the ones still relaying close when they finish)."""
        self._is_closed = True
        closed = [connection for connections in self._idle.values() for connection in connections]
        for connection in closed:
            connection.close()
        self._idle.clear()
        return closed

    async def aclose(self, timeout_s: float = 1.0) -> None:
        """Close every connection, pooled or busy (the gateway is stopping: a health probe cut
        short, a relay past uvicorn's grace), and wait until they are gone: a TLS one sends its
        close_notify first, and an event loop closed before then still holds its socket."""
        self.close()
        live = list(self._live)
        for connection in live:
            connection.close()
        if live:
            await asyncio.wait([c.lost for c in live], timeout=timeout_s)
        for connection in self._live:  # a peer that never answered the close: cut it
            if connection.transport is not None:
                connection.transport.abort()
        while self._live and timeout_s > 0:  # the aborts finish on the loop's next passes
            await asyncio.sleep(0.01)
            timeout_s -= 0.01


def get_once(url: str, ca_file: str | None, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """One GET outside the serving loop (start-up: the engine's limits, replicas' readiness)."""

    async def get() -> tuple[int, bytes]:
        client = UpstreamClient(timeout_s, timeout_s, ca_file)
        try:
            return await client.get_body(url, timeout_s=timeout_s)
        finally:
            await client.aclose()

    return asyncio.run(get())


async def _read_head(connection: _Connection) -> tuple[int, dict[str, str]]:
    """Status and headers; any failure closes the connection and says what it means."""
    try:
        return _parse_head(await connection.read_head())
    except (ConnectionResetError, BrokenPipeError) as exc:
        connection.close()
        raise _StaleConnection(type(exc).__name__) from None
    except asyncio.IncompleteReadError as exc:
        connection.close()
        if connection.timed_out:
            raise UpstreamTimeout("timed out waiting for the response") from None
        error = _StaleConnection if not exc.partial else UpstreamConnectionError
        raise error("connection closed before the response") from None
    except (OSError, ValueError) as exc:
        connection.close()
        raise UpstreamConnectionError(f"{type(exc).__name__} before the response") from None
    except BaseException:  # cancelled (the client left): the connection is mid-exchange
        connection.close()
        raise


def _decode_chunks(data: bytes) -> tuple[list[bytes], bytes, bool]:
    """Complete chunks at the front of `data`, the undecoded rest, and whether the last
    (zero-size) chunk was seen. Chunk extensions are ignored and trailers not supported."""
    pieces: list[bytes] = []
    start, num_bytes = 0, len(data)
    while start < num_bytes and (line_end := data.find(b"\r\n", start)) >= 0:
        try:
            size = int(data[start:line_end], 16)
        except ValueError:  # an extension (";name=value"), else not hex: ValueError again
            size = int(data[start:line_end].split(b";", 1)[0], 16)
        body_end = line_end + 2 + size
        if num_bytes < body_end + 2:
            break
        if size == 0:
            return pieces, data[body_end + 2 :], True
        pieces.append(data[line_end + 2 : body_end])
        start = body_end + 2
    return pieces, data[start:] if start else data, False


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, status, _ = (status_line + " ").split(" ", 2)
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {status_line[:40]!r}")
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(status), headers
