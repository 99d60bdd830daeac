"""Which of a client's request headers go on to the engine.

End-to-end headers pass (tracing such as `traceparent`/`tracestate`, `x-request-id`, the
client's own `x-*`), as through any proxy. Not passed: hop-by-hop headers, which describe one
connection (RFC 9110 section 7.6.1: `Connection` and the headers it names, `Proxy-Connection`,
`Keep-Alive`, `TE`, `Transfer-Encoding`, `Upgrade`; and `Proxy-Authorization`,
`Proxy-Authenticate`, `Trailer` from RFC 2616 13.5.1); the client's key (`Authorization`: the
engines get `--upstream-api-key`); and what the gateway writes itself for the body it sends
(`Host`, `Content-Length`, `Content-Type`, `Expect`), `Accept-Encoding` included: the relay reads
the engine's SSE events, so the answer must not come compressed.
"""

from __future__ import annotations

from kvwise.gateway.asgi import Scope

NOT_FORWARDED = frozenset(
    {
        b"connection", b"proxy-connection", b"keep-alive", b"te", b"transfer-encoding",
        b"upgrade", b"proxy-authorization", b"proxy-authenticate", b"trailer",
        b"authorization", b"host", b"content-length", b"content-type", b"expect",
        b"accept-encoding",
    }
)  # fmt: skip


def forwarded_headers(scope: Scope, own: dict[str, str]) -> dict[str, str]:
    """`own` (the gateway's headers for the engine) plus the client's end-to-end headers."""
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    named = [value for name, value in raw if name == b"connection"]
    dropped = NOT_FORWARDED
    if named:  # headers the client's Connection header names are hop-by-hop too
        dropped = dropped | {t.strip().lower() for v in named for t in bytes(v).split(b",")}
    headers = dict(own)
    for name, value in raw:
        if name not in dropped:
            key = name.decode("latin-1")
            text = bytes(value).decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers
