"""GET /ui: the live page (one HTML file, one script, one stylesheet, shipped in the package).

The page polls /kvwise/status (`kvwise.gateway.status`) and draws its charts as inline SVG in a
few lines of JavaScript: nothing is fetched from anywhere but the gateway itself. It is an admin
view: with admin keys set the browser asks for one (HTTP Basic, any user name, the key as the
password), as /metrics and /kvwise/status do.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from kvwise.gateway.status import admin_denial

ASSETS = {
    "ui.js": "text/javascript; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
}
# the page runs only its own script and style, and talks only to the gateway
_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:",
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
}


@cache
def asset_text(name: str) -> str:
    return resources.files("kvwise.gateway").joinpath("assets").joinpath(name).read_text("utf-8")


def _serve(gateway: Any, request: Request, name: str, media_type: str) -> Response:
    denial = admin_denial(gateway, request.scope)
    if denial is not None:
        return denial
    return Response(asset_text(name), media_type=media_type, headers=_HEADERS)


async def page(request: Request) -> Response:
    return _serve(request.app.state.gateway, request, "ui.html", "text/html; charset=utf-8")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return Response("not found", 404, media_type="text/plain")
    return _serve(request.app.state.gateway, request, name, ASSETS[name])
