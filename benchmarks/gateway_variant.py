"""`kvwise serve` with another upstream HTTP client in place of aiohttp: one side of the A/B in
`gateway_overhead.py`. Nothing here ships in the package.

    python benchmarks/gateway_variant.py {shipped,aiohttp,httpx} serve --upstream URL ...

* shipped: the gateway as shipped (`kvwise.gateway.upstream_http`, HTTP/1.1 on asyncio);
* aiohttp: `aiohttp_client.py`, aiohttp's ClientSession behind the same interface;
* httpx: httpx's AsyncClient with its pool uncapped (streamed responses, per-request timeouts).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import httpx

from kvwise.gateway import app
from kvwise.gateway.upstream_http import UpstreamConnectionError, UpstreamTimeout


async def _get_body(
    client: Any, url: str, headers: Any, timeout_s: float | None
) -> tuple[int, bytes]:
    async def get() -> tuple[int, bytes]:
        response = await client.get(url, headers)
        try:
            return response.status, await response.read()
        finally:
            response.close()

    try:
        return await asyncio.wait_for(get(), timeout_s or client.read_timeout_s)
    except asyncio.TimeoutError:
        raise UpstreamTimeout(f"no answer from {url} in time") from None


_closing: set[asyncio.Future[None]] = set()


class _HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def iter_raw(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.aiter_raw():
                yield piece
        except httpx.TimeoutException:
            raise UpstreamTimeout("timed out while reading the body") from None
        except httpx.HTTPError as exc:
            raise UpstreamConnectionError(type(exc).__name__) from None

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.iter_raw()])

    def close(self) -> None:
        _closing.add(task := asyncio.ensure_future(self._response.aclose()))
        task.add_done_callback(_closing.discard)


class HttpxClient:
    def __init__(self, connect_s: float, read_s: float, ca_file: str | None = None) -> None:
        self.connect_timeout_s, self.read_timeout_s = connect_s, read_s
        self._client: httpx.AsyncClient | None = None

    def _open(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=1024)
            self._client = httpx.AsyncClient(limits=limits)
        return self._client

    async def _request(
        self, method: str, url: str, body: bytes | None, headers: Any, read_s: float | None
    ) -> _HttpxResponse:
        client = self._open()
        timeout = httpx.Timeout(read_s or self.read_timeout_s, connect=self.connect_timeout_s)
        request = client.build_request(
            method, url, content=body, headers=dict(headers or {}), timeout=timeout
        )
        try:
            return _HttpxResponse(await client.send(request, stream=True))
        except httpx.TimeoutException:
            raise UpstreamTimeout("timed out waiting for the response") from None
        except httpx.HTTPError as exc:
            raise UpstreamConnectionError(type(exc).__name__) from None

    async def post(
        self, url: str, body: bytes, headers: Any, read_timeout_s: float | None = None
    ) -> _HttpxResponse:
        return await self._request("POST", url, body, headers, read_timeout_s)

    async def get(self, url: str, headers: Any = None) -> _HttpxResponse:
        return await self._request("GET", url, None, headers, None)

    async def get_body(
        self, url: str, headers: Any = None, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        return await _get_body(self, url, headers, timeout_s)

    def abort_waiting(self, base_url: str) -> int:
        return 0

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def main() -> int:
    variant, argv = sys.argv[1], sys.argv[2:]
    if variant == "aiohttp":
        from aiohttp_client import UpstreamClient as AiohttpClient

        app.UpstreamClient = AiohttpClient  # type: ignore[misc,assignment]
    elif variant == "httpx":
        app.UpstreamClient = HttpxClient  # type: ignore[misc,assignment]
    elif variant != "shipped":
        sys.exit(f"unknown client {variant}: give shipped, aiohttp or httpx")
    from kvwise.cli import main as kvwise_main

    return kvwise_main(argv)


if __name__ == "__main__":
    sys.exit(main())
