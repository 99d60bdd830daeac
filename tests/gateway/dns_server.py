"""A real DNS server on loopback (dnslib's `DNSServer`, UDP), with records a test changes while
the gateway runs: what a Kubernetes headless Service's name does as pods come and go."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer

from tests.engine_fixture import free_port


class Records(BaseResolver):  # type: ignore[misc]
    """name -> addresses; a name not listed answers NXDOMAIN."""

    def __init__(self) -> None:
        self.addresses: dict[str, list[str]] = {}
        self.num_queries = 0
        self._lock = threading.Lock()

    def set(self, name: str, addresses: list[str]) -> None:
        with self._lock:
            self.addresses[name] = list(addresses)

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        reply = request.reply()
        name, qtype = str(request.q.qname).rstrip("."), QTYPE[request.q.qtype]
        with self._lock:
            self.num_queries += 1
            addresses = self.addresses.get(name)
        if addresses is None:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        for address in addresses:
            if qtype == "A" and ":" not in address:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=1))
            elif qtype == "AAAA" and ":" in address:
                reply.add_answer(RR(request.q.qname, QTYPE.AAAA, rdata=AAAA(address), ttl=1))
        return reply


@contextmanager
def dns_server() -> Iterator[tuple[Records, int]]:
    """The records and the UDP port of a nameserver on 127.0.0.1."""
    records = Records()
    port = free_port()
    quiet = DNSLogger(log="-request,-reply,-truncated,-error,-recv,-send,-data", prefix=False)
    server = DNSServer(records, address="127.0.0.1", port=port, logger=quiet)
    server.start_thread()
    try:
        yield records, port
    finally:
        server.stop()
        server.server.server_close()
