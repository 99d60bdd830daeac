"""What `kvwise serve` prints at start: the limits it enforces and where each came from."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from kvwise.gateway.config import GatewayConfig, SecurityConfig
from kvwise.gateway.discovery import Limits
from kvwise.gateway.security import read_keys_file


def describe(config: GatewayConfig, limits: Limits, args: argparse.Namespace) -> dict[str, Any]:
    sessions = config.sessions
    return {
        "listen": f"http://{args.host}:{args.port}",
        "replicas": [
            {"name": u.name, "url": u.url, "kv_budget_tokens": u.budget_tokens}
            for u in config.upstreams
        ],
        "replicas_from_dns": _dns(config),
        "kv_budget_source": limits.kv_budget_source,
        "max_model_len": config.max_model_len,
        "max_model_len_source": limits.max_model_len_source,
        "max_num_seqs": limits.max_num_seqs,
        "max_num_seqs_source": limits.max_num_seqs_source,
        "plan": limits.plan_summary,
        "max_queue": config.admission.max_queue,
        "queue_timeout_s": config.admission.queue_timeout_s,
        "admission_store": _without_password(config.admission.store),
        "api_keys": _num_api_keys(config.security),
        "admin_keys": len(config.security.admin_keys),
        "session_from_user": bool(sessions and sessions.is_user_session),
        "server_limits": dataclasses.asdict(config.server),
        "stall_timeout_s": config.stall_timeout_s,
        "session_store": sessions.store if sessions else None,
        "session_history": bool(sessions and sessions.is_history_enabled),
        "token_counting": "tokenizer.json"
        if config.tokenizer_path
        else "UTF-8 bytes (upper bound)",
    }


def _dns(config: GatewayConfig) -> dict[str, Any] | None:
    membership = config.membership
    if membership is None or membership.dns is None:
        return None
    target = membership.dns
    return {"name": f"{target.host}:{target.port}", "interval_s": membership.dns_interval_s,
            "kv_budget_tokens": membership.budget_tokens}  # fmt: skip


def print_limits(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2), flush=True)
        return
    s = summary
    lines = ["kvwise serve: enforcing"]
    if s["plan"]:
        lines.append(f"  plan:          {s['plan']}")
    for r in s["replicas"]:
        lines.append(
            f"  replica {r['name']}:    {r['url']}  KV budget {r['kv_budget_tokens']:,} tokens"
        )
    if s["replicas_from_dns"]:
        dns = s["replicas_from_dns"]
        lines.append(f"  replicas from DNS: {dns['name']} (every {dns['interval_s']:g} s), each "
                     f"KV budget {dns['kv_budget_tokens']:,} tokens")  # fmt: skip
    history = "on" if s["session_history"] else "off"
    lines += [
        f"  KV budget from {s['kv_budget_source']}",
        f"  max_model_len: {s['max_model_len']:,} (from {s['max_model_len_source']})",
        _running_cap_line(s),
        f"  queue:         {s['max_queue']} requests, {s['queue_timeout_s']:g} s timeout; 429 past",
        f"  admission:     {_budget_scope(s['admission_store'])}",
        f"  sessions:      store {s['session_store']}, history {history}",
        f"  prompt count:  {s['token_counting']}; API keys: {s['api_keys'] or 'none'}, "
        f"admin keys: {s['admin_keys'] or 'none (/metrics open)'}",
        _connections_line(s["server_limits"]),
        f"  listening on   {s['listen']}",
    ]
    print("\n".join(lines), flush=True)


def _without_password(url: str | None) -> str | None:
    """The store's URL as printed: a password in it becomes ***."""
    if url is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _budget_scope(store: str | None) -> str:
    if store is None:
        return "this gateway's own (other gateways in front of these replicas are not counted)"
    return f"shared with every gateway on {store}"


def _num_api_keys(security: SecurityConfig) -> int:
    in_file = read_keys_file(Path(security.api_keys_file)) if security.api_keys_file else ()
    return len(security.api_keys) + len(in_file)


def _connections_line(limits: dict[str, Any]) -> str:
    return (
        f"  connections:   at most {limits['max_connections']}; heads <= "
        f"{limits['max_head_bytes']:,} bytes / {limits['max_headers']} headers in "
        f"{limits['head_timeout_s']:g} s, bodies in {limits['body_timeout_s']:g} s, idle "
        f"{limits['keep_alive_timeout_s']} s"
    )


def _running_cap_line(s: dict[str, Any]) -> str:
    if s["max_num_seqs"] is None:
        return f"  running cap:   {s['max_num_seqs_source']}"
    return f"  running cap:   {s['max_num_seqs']} sequences per replica (from {s['max_num_seqs_source']})"
