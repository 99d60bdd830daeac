"""Admin routes to see, add and drain replicas by URL (admin key required):

    GET  /kvwise/replicas                          every replica, its state and where it came from
    POST /kvwise/replicas        {"url": "http://10.0.0.7:8000"}   add (joins once healthy)
    POST /kvwise/replicas/drain  {"url": "http://10.0.0.7:8000"}   no new requests; removed
                                                                  once its streams finish

Changing replicas needs `--admin-key`: without one these routes answer 403, so an open gateway
cannot be pointed at an address of a caller's choosing.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kvwise.gateway.asgi import HttpError
from kvwise.gateway.status import admin_denial

MAX_ADMIN_BODY_BYTES = 4096


def _denial(gateway: Any, request: Request) -> Response | None:
    if not gateway.admin_keys.is_required:
        error = HttpError(403, "replicas are changed with an admin key: start with --admin-key",
                          "permission_error")  # fmt: skip
        return JSONResponse(error.body(), error.status)
    return admin_denial(gateway, request.scope)


async def _url(request: Request) -> str:
    body = await request.body()
    try:
        data = json.loads(body) if len(body) <= MAX_ADMIN_BODY_BYTES else None
    except ValueError:
        data = None
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 512:
        raise HttpError(400, 'give {"url": "http(s)://HOST:PORT"}', "invalid_request_error")
    return url


async def list_replicas(request: Request) -> Response:
    gateway = request.app.state.gateway
    denial = _denial(gateway, request)
    return denial or JSONResponse({"replicas": gateway.membership.describe()})


async def _admin_url(request: Request) -> tuple[Any, str] | Response:
    """(the gateway, the URL in the body) for an admin, else the response that refuses."""
    gateway = request.app.state.gateway
    denial = _denial(gateway, request)
    if denial is not None:
        return denial
    try:
        return gateway, await _url(request)
    except HttpError as exc:
        return JSONResponse(exc.body(), exc.status)


async def add_replica(request: Request) -> Response:
    found = await _admin_url(request)
    if isinstance(found, Response):
        return found
    gateway, url = found
    state = await gateway.membership.add(url)
    return JSONResponse(
        {"url": url.rstrip("/"), "state": state}, 200 if state == "serving" else 202
    )


async def drain_replica(request: Request) -> Response:
    found = await _admin_url(request)
    if isinstance(found, Response):
        return found
    gateway, url = found
    url = url.rstrip("/")
    known = {r.url for r in gateway.replicas} | set(gateway.membership.pending)
    if url not in known:
        error = HttpError(404, f"no replica {url}", "not_found_error")
        return JSONResponse(error.body(), error.status)
    replica = gateway.membership.drain(url)
    if replica is None:  # it had not joined yet
        return JSONResponse({"url": url, "state": "removed"}, 200)
    gateway.membership.drop_drained()
    state = "removed" if replica not in gateway.replicas else "draining"
    body = {"url": replica.url, "state": state, "num_in_flight": replica.num_in_flight}
    return JSONResponse(body, 202 if state == "draining" else 200)
