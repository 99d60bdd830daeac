"""aiohttp as the gateway's upstream client: one side of the A/B in `gateway_overhead.py`
(`--clients aiohttp`), written to the same interface as `kvwise.gateway.upstream_http`
(so it drops into the gateway, see `gateway_variant.py`) and with what the gateway needs of it:
TLS verified as the shipped client does, keep-alive pooling, TCP_NODELAY (aiohttp sets it on
every connection), a read timeout per silence (`sock_read`), aborts of requests waiting for a
replica marked down, one retry on a kept-alive connection the server had closed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping

import aiohttp

from kvwise.gateway.upstream_http import (
    ReplicaAborted,
    UpstreamConnectionError,
    UpstreamTimeout,
    tls_context,
)

# Idle kept-alive connections are dropped after this long, under the 5 s after which vLLM's
# server (uvicorn, `VLLM_HTTP_TIMEOUT_KEEP_ALIVE` in vllm/envs.py, default 5) closes them:
# a connection taken from the pool is then rarely one the server is closing.
KEEPALIVE_S = 4.0
READ_BYTES = 64 * 1024  # at most this much per body read (aiohttp's own chunk)


def _describe(exc: BaseException, url: str) -> str:
    """One line for a failure to reach `url`, naming the fix for an untrusted certificate."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        reason = getattr(exc.certificate_error, "verify_message", "") or exc.certificate_error
        return (
            f"TLS certificate of {url.split('/', 3)[2]} not trusted ({reason}); "
            "give its CA with --upstream-ca FILE or SSL_CERT_FILE"
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS with {url.split('/', 3)[2]} failed ({type(exc.__cause__ or exc).__name__})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {type(exc.os_error).__name__}"
    return type(exc).__name__


class UpstreamResponse:
    """Status and headers of an upstream answer; its body is read by the caller, then
    `close()` gives the connection back to the pool (or drops it when the body was not read)."""

    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self._response = response
        self._url = url
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers  # case-insensitive

    async def iter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives, transfer encoding removed, each read as one piece."""
        content = self._response.content
        try:
            while piece := await content.readany():
                yield piece
        except asyncio.TimeoutError:
            raise UpstreamTimeout("timed out while reading the body") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamConnectionError(
                f"{_describe(exc, self._url)} while reading the body"
            ) from None

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.iter_raw()])

    def close(self) -> None:
        self._response.release()  # back to the pool if read to its end, else closed


class UpstreamClient:
    def __init__(
        self, connect_timeout_s: float, read_timeout_s: float, ca_file: str | None = None
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.tls = tls_context(ca_file)
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        # the tasks with a request sent and no response head yet, per upstream
        self._waiting: defaultdict[str, set[asyncio.Task[object]]] = defaultdict(set)
        self._aborted: set[asyncio.Task[object]] = set()

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use: inside the event loop that serves."""
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=0, ssl=self.tls, keepalive_timeout=KEEPALIVE_S, enable_cleanup_closed=False
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,  # bytes relayed as the engine sent them
                # only what the gateway forwards: an Accept-Encoding would get SSE compressed
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
                read_bufsize=READ_BYTES,
            )
        return self._session

    def _timeout(self, read_timeout_s: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(read_timeout_s)
        if timeout is None:
            timeout = self._timeouts[read_timeout_s] = aiohttp.ClientTimeout(
                total=None, sock_connect=self.connect_timeout_s, sock_read=read_timeout_s
            )
        return timeout

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        read_timeout_s: float | None = None,
    ) -> UpstreamResponse:
        """Send the request and read the response head; the body is read by the caller.
        `read_timeout_s`: the longest silence (before the head, between reads) for this one."""
        return await self._request("POST", url, body, headers, read_timeout_s)

    async def get(
        self, url: str, headers: Mapping[str, str] | None = None, timeout_s: float | None = None
    ) -> UpstreamResponse:
        return await self._request("GET", url, None, headers or {}, timeout_s)

    async def get_body(
        self, url: str, headers: Mapping[str, str] | None = None, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        """Status and whole body of a GET, within `timeout_s` in all (health, metrics, models)."""

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

    def abort_waiting(self, base_url: str) -> int:
        """Abort the requests to `base_url` still waiting for a response head (the replica was
        marked down): they fail with ReplicaAborted and can go elsewhere. How many."""
        waiting = self._waiting.pop(_base_url(base_url), set())
        for task in waiting:
            self._aborted.add(task)
            task.cancel()
        return len(waiting)

    async def _request(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str],
        read_timeout_s: float | None,
    ) -> UpstreamResponse:
        session = self._open()
        timeout = self._timeout(read_timeout_s or self.read_timeout_s)
        task = asyncio.current_task()
        assert task is not None
        waiting = self._waiting[_base_url(url)]
        waiting.add(task)  # type: ignore[arg-type]
        try:
            for attempt in range(2):
                try:
                    response = await session.request(
                        method, url, data=body, headers=headers, timeout=timeout
                    )
                    return UpstreamResponse(response, url)
                except aiohttp.ClientConnectorError:
                    raise
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    # a kept-alive connection the server closed as it was taken: it processed
                    # nothing, so send again once on a fresh one
                    if attempt == 1:
                        raise
            raise AssertionError("unreachable")
        except asyncio.CancelledError:
            if task not in self._aborted:
                raise
            self._aborted.discard(task)
            task.uncancel()
            raise ReplicaAborted("the replica was marked down") from None
        except asyncio.TimeoutError:
            raise UpstreamTimeout("timed out waiting for the response") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UpstreamConnectionError(_describe(exc, url)) from None
        finally:
            waiting.discard(task)  # type: ignore[arg-type]

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _base_url(url: str) -> str:
    """scheme://host:port of a URL: the replica it goes to."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
