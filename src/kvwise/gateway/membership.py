"""Replicas that come and go while the gateway runs: found by DNS, added or drained by an admin.

A replica joins only once a health check passes (a pod listed before its engine has loaded
gets no request). One that leaves is drained: it takes no new request (the router's ring no
longer holds it, so only its keys move), the streams in flight on it finish, and once nothing
of ours runs there (with a shared admission store: nothing of any gateway's) it is dropped.
Sessions pinned to it move to the next replica on the ring; their history is the gateway's own
(`--session-history`), so the new replica gets the whole conversation.

Where replicas come from: `--upstream` URLs stay until an admin drains them; `--upstream-dns`
names follow the name's records (`replica_dns`); an admin adds and drains by URL
(POST /kvwise/replicas, POST /kvwise/replicas/drain). A URL an admin drained is not taken back
from DNS until an admin adds it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kvwise.gateway.replica_dns import DnsTarget, resolve_urls
from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router

log = logging.getLogger("kvwise.gateway")

# How often the Service name is resolved again: CoreDNS's default cache TTL for cluster records
# is 5 s (the `cache 30` plugin bounds it at 30; the kubernetes plugin's `ttl` default is 5):
# coredns.io/plugins/kubernetes/
DNS_INTERVAL_S = 5.0


@dataclass(frozen=True)
class MembershipConfig:
    budget_tokens: int  # KV budget of a replica that joins (the same plan as the others)
    max_num_seqs: int | None = None
    dns: DnsTarget | None = None
    dns_interval_s: float = DNS_INTERVAL_S


class Membership:
    def __init__(
        self,
        replicas: list[Replica],
        router: Router,
        config: MembershipConfig,
        probe: Callable[[Replica], Awaitable[None]],
    ) -> None:
        self.replicas = replicas  # the gateway's own list: changed in place
        self.router = router
        self.config = config
        self.probe = probe  # a health check: leaves `is_healthy` set as it found the replica
        self.pending: dict[str, Replica] = {}  # waiting for a health check to pass
        self.sources = {r.url: "static" for r in replicas}
        self.drained_by_admin: set[str] = set()
        self._next_dns_s = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._has_refreshed = False

    async def tick(self) -> None:
        """Once per health interval: drains that are done, and DNS when due and joins that pass.
        The first tick (at start, before the first request) waits for them; later ones run them
        beside the health checks, so a slow nameserver or a pending replica that does not answer
        cannot hold up the checks of the replicas in service."""
        self.drop_drained()
        if not self._has_refreshed:
            self._has_refreshed = True
            await self._refresh()
        elif self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())

    async def close(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing

    async def _refresh(self) -> None:
        try:
            if self.config.dns is not None and time.monotonic() >= self._next_dns_s:
                self._next_dns_s = time.monotonic() + self.config.dns_interval_s
                urls = await resolve_urls(self.config.dns)
                if urls is not None:
                    self.follow_dns(urls)
            await self._admit_pending()
        except Exception:  # the next tick tries again
            log.exception("replica discovery failed")

    def follow_dns(self, urls: set[str]) -> None:
        known = {r.url: r for r in self.replicas}
        for url in sorted(urls - known.keys() - self.pending.keys() - self.drained_by_admin):
            self._expect(url, "dns")
        for url, replica in known.items():
            if self.sources.get(url) != "dns":
                continue
            if url not in urls and not replica.is_draining:
                self.drain(url, by_admin=False)
            elif url in urls and replica.is_draining and url not in self.drained_by_admin:
                self._set_draining(replica, False)
                log.warning("replica %s is listed again: back in service", replica.name)
        for url in [u for u in self.pending if self.sources.get(u) == "dns" and u not in urls]:
            del self.pending[url]

    async def add(self, url: str) -> str:
        """An admin's replica: joins at once if healthy, else on the tick its check passes."""
        url = url.rstrip("/")
        self.drained_by_admin.discard(url)
        known = next((r for r in self.replicas if r.url == url), None)
        if known is not None:
            if known.is_draining:
                self._set_draining(known, False)
            return self.state(known)
        self._expect(url, "admin")
        await self._admit_pending()
        return "serving" if url not in self.pending else "pending"

    def drain(self, url: str, *, by_admin: bool = True) -> Replica | None:
        """Out of the ring now; dropped once idle. An admin's drain holds against DNS."""
        url = url.rstrip("/")
        if by_admin:
            self.drained_by_admin.add(url)
        if self.pending.pop(url, None) is not None:
            return None
        replica = next((r for r in self.replicas if r.url == url), None)
        if replica is not None and not replica.is_draining:
            reason = "drained by an admin" if by_admin else "gone from DNS"
            log.warning("replica %s draining (%s): %d request(s) in flight finish there",
                        replica.name, reason, replica.num_in_flight)  # fmt: skip
            self._set_draining(replica, True)
        return replica

    def drop_drained(self) -> None:
        done = [r for r in self.replicas if r.is_draining and r.num_in_flight == 0]
        for replica in done:
            self.replicas.remove(replica)
            self.sources.pop(replica.url, None)
            log.warning("replica %s drained: removed", replica.name)
        if done:
            self.router.rebuild(self.replicas)

    def state(self, replica: Replica) -> str:
        if replica.is_draining:
            return "draining"
        return "serving" if replica.is_healthy else "down"

    def describe(self) -> list[dict[str, Any]]:
        rows = [
            {"name": r.name, "url": r.url, "state": self.state(r), "source": self.sources.get(
                r.url, "static"), "num_in_flight": r.num_in_flight}
            for r in self.replicas
        ]  # fmt: skip
        rows += [
            {"name": r.name, "url": r.url, "state": "pending", "source": self.sources[r.url],
             "num_in_flight": 0}
            for r in self.pending.values()
        ]  # fmt: skip
        return rows

    def _expect(self, url: str, source: str) -> None:
        replica = Replica(url.split("://", 1)[-1], url, self.config.budget_tokens,
                          self.config.max_num_seqs)  # fmt: skip
        replica.is_healthy = False  # until its first health check passes
        self.pending[url] = replica
        self.sources[url] = source

    async def _admit_pending(self) -> None:
        waiting = list(self.pending.values())
        await asyncio.gather(*(self.probe(r) for r in waiting))
        joined = [r for r in waiting if r.is_healthy and self.pending.get(r.url) is r]
        for replica in joined:
            del self.pending[replica.url]
            self.replicas.append(replica)
            log.warning("replica %s (%s) joined: health check passed", replica.name, replica.url)
        if joined:
            self.router.rebuild(self.replicas)

    def _set_draining(self, replica: Replica, is_draining: bool) -> None:
        replica.is_draining = is_draining
        self.router.rebuild(self.replicas)
