"""The gateway's OpenAPI document: its request schemas, headers and answers, for clients and
fuzzers (schemathesis) alike."""

from __future__ import annotations

from typing import Any

from kvwise.gateway.schemas import ChatRequest, CompletionRequest

# what a client may get back, besides 200; a 5xx other than these is a gateway bug
CLIENT_ERRORS = {
    "400": "invalid request (OpenAI's error shape, `param` names the field)",
    "401": "missing or unknown API key",
    "413": "body over --max-body-bytes",
    "429": "rate, concurrency or queue share of the key exceeded, or the queue is full",
}
SERVER_STATES = {
    "502": "every replica failed before the first token",
    "503": "no healthy replica, or the session store is unreachable",
}
SESSION_HEADER = {
    "name": "X-Session-Id",
    "in": "header",
    "required": False,
    "description": "an agent session: the gateway keeps its history (--session-history)",
    "schema": {"type": "string", "maxLength": 256},
}


def openapi_document() -> dict[str, Any]:
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for path, model in (
        ("/v1/chat/completions", ChatRequest),
        ("/v1/completions", CompletionRequest),
    ):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        body = {"required": True, "content": {"application/json": {"schema": schema}}}
        responses = {"200": {"description": "completion (JSON, or SSE when streamed)"}}
        responses.update(_described(CLIENT_ERRORS) | _described(SERVER_STATES))
        operation = {"requestBody": body, "parameters": [SESSION_HEADER], "responses": responses}
        paths[path] = {"post": operation}
    paths["/v1/models"] = {"get": {"responses": _described({"200": "the served models"})}}
    health = {"200": "up", "503": "no healthy replica"}
    paths["/health"] = {"get": {"security": [], "responses": _described(health)}}
    bearer = {"type": "http", "scheme": "bearer"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "kvwise gateway", "version": "1"},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"apiKey": bearer}},
        "security": [{"apiKey": []}],
    }


def _described(codes: dict[str, str]) -> dict[str, Any]:
    return {code: {"description": text} for code, text in codes.items()}
