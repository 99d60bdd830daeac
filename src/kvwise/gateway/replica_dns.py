"""Replica addresses from DNS: a Kubernetes headless Service answers one A/AAAA record per ready
pod (kubernetes.io/docs/concepts/services-networking/service/#headless-services), so the
gateway finds its engines by resolving the Service's name, again every few seconds.

Resolution goes through dnspython with the system's resolver settings (/etc/resolv.conf: the
cluster DNS, its search domains and ndots), or a nameserver given explicitly. A name that does
not exist or has no addresses is an answer (no replicas); a resolver that does not answer is
not: the replicas known stay.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from kvwise.errors import UsageError

log = logging.getLogger("kvwise.gateway")

RESOLVE_TIMEOUT_S = 2.0  # a tick's whole lookup (both record types); the next tick tries again


@dataclass(frozen=True)
class DnsTarget:
    host: str  # the headless Service's name: vllm-headless.NAMESPACE.svc.cluster.local
    port: int  # the engines' port (every address serves on it)
    nameserver: str | None = None  # an address to ask instead of /etc/resolv.conf's
    nameserver_port: int = 53

    def url(self, address: str) -> str:
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{self.port}"


def parse_host_port(text: str, flag: str, default_port: int | None = None) -> tuple[str, int]:
    """NAME:PORT or [IPv6]:PORT (PORT optional when there is a default)."""
    host, sep, port = text.rpartition(":")
    if text.startswith("[") and "]" in text:
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    elif not sep or not port.isdigit():
        host, port = text, ""
    if not port and default_port is not None:
        port = str(default_port)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{flag} {text}: give NAME:PORT (e.g. vllm-headless.default.svc:8000)")
    return host, int(port)


def dns_target(upstream_dns: str, dns_server: str | None) -> DnsTarget:
    host, port = parse_host_port(upstream_dns, "--upstream-dns")
    if dns_server is None:
        return DnsTarget(host, port)
    server, server_port = parse_host_port(dns_server, "--dns-server", default_port=53)
    try:
        ipaddress.ip_address(server)
    except ValueError:
        raise UsageError(f"--dns-server {dns_server}: give the nameserver's IP address") from None
    return DnsTarget(host, port, server, server_port)


async def resolve_urls(target: DnsTarget) -> set[str] | None:
    """The replica URLs the name has now; None when the resolver could not be asked."""
    import dns.asyncresolver
    import dns.exception
    import dns.resolver

    resolver = dns.asyncresolver.Resolver(configure=target.nameserver is None)
    if target.nameserver is not None:
        resolver.nameservers = [target.nameserver]
        resolver.port = target.nameserver_port
    addresses: set[str] = set()
    for record_type in ("A", "AAAA"):
        try:
            answer = await resolver.resolve(
                target.host, record_type, search=True, lifetime=RESOLVE_TIMEOUT_S
            )
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            continue  # no such name, or no address of this family: no replicas from it
        except dns.exception.DNSException as exc:
            log.warning("cannot resolve %s (%s): the replicas known stay", target.host, exc)
            return None
        addresses.update(record.to_text() for record in answer)
    return {target.url(address) for address in addresses}
