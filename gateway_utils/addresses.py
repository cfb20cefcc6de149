"""Which network addresses the gateway may call on someone's behalf (docs/reference/environment.md).

Pure functions, no I/O: `address_refusal` says why an address is not a public
one (loopback, private, link-local, a cloud metadata service, …), and
`AllowList` is `GATEWAY_OUTBOUND_ALLOW` parsed (CIDRs, addresses, host names).
`gateway_utils.outbound` resolves names and applies both, at config time and again
on every connection; `gateway.settings` uses `AllowList.parse` to refuse a bad
setting at start-up. A leaf module: standard library only.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services answer here: AWS, GCP, Azure, OpenStack, Oracle (169.254.169.254),
# AWS ECS tasks (169.254.170.2), AWS over IPv6 (fd00:ec2::254), Alibaba Cloud (100.100.100.200).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598, carrier-grade NAT
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")  # RFC 4193
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the IPv4 address is the last 32 bits


def address_refusal(address: str | IPAddress) -> str | None:
    """Why the gateway must not call `address` on someone's behalf, or None for a public address.

    IPv6 addresses that carry an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, 6to4,
    Teredo, NAT64) are judged by the IPv4 address they lead to.
    """
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            reason = address_refusal(embedded)
            return f"{reason} (as {embedded})" if reason else None
    if ip in METADATA_ADDRESSES:
        return "cloud metadata service"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip in _SHARED:
        return "shared (carrier-grade NAT)"
    if ip in _UNIQUE_LOCAL:
        return "unique local"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "not globally routable"
    return None


def parse_address(host: str) -> IPAddress | None:
    """`host` as an IP address if it is one (`[::1]` and `fe80::1%eth0` too), else None."""
    host = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class AllowList:
    """`GATEWAY_OUTBOUND_ALLOW`: networks (`10.0.0.0/8`, `::1`) whose addresses may be called, and
    host names (`opa.internal`, `*.svc.cluster.local`) that may be called whatever they resolve to."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Raises ValueError naming the first entry that is neither a network, an address nor a host name."""
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            name = entry.removeprefix("*.")
            if not name or "/" in name or any(not label or len(label) > 63 for label in name.split(".")) or not all(
                c.isalnum() or c in "-._" for c in name
            ):
                raise ValueError(f"{raw!r} is not a network (10.0.0.0/8), an address or a host name")
            hosts.append(entry)
        return cls(tuple(networks), tuple(hosts))

    def allows_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == h or (h.startswith("*.") and host.endswith(h[1:])) for h in self.hosts)

    def allows_address(self, address: IPAddress) -> bool:
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            candidates.append(address.ipv4_mapped)
        return any(a in network for a in candidates for network in self.networks)
