"""The gateway's OpenAPI document: its request schemas, for clients and fuzzers alike."""

from __future__ import annotations

from typing import Any

from kvwise.gateway.schemas import ChatRequest, CompletionRequest


def openapi_document() -> dict[str, Any]:
    """The request schemas, for clients and fuzzers (schemathesis) alike."""
    operations = {
        "/v1/chat/completions": ChatRequest.model_json_schema(
            ref_template="#/components/schemas/{model}"
        ),
        "/v1/completions": CompletionRequest.model_json_schema(
            ref_template="#/components/schemas/{model}"
        ),
    }
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for path, schema in operations.items():
        components.update(schema.pop("$defs", {}))
        body = {"required": True, "content": {"application/json": {"schema": schema}}}
        outcomes = ((200, "completion"), (400, "invalid request"), (401, "bad key"), (429, "busy"))
        responses = {str(code): {"description": text} for code, text in outcomes}
        paths[path] = {"post": {"requestBody": body, "responses": responses}}
    info = {"title": "kvwise gateway", "version": "1"}
    return {"openapi": "3.1.0", "info": info, "paths": paths, "components": {"schemas": components}}
