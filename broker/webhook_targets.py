"""Where webhooks may go: the SSRF guard.

A webhook target must be a globally routable address unless the operator passes
`--allow-private-webhooks`. The guard decides twice:

- when the webhook is added, on the URL's host as written: IP literals in every form the C
  resolver accepts (`127.1`, `2130706433`, `0x7f000001`, `017700000001`, `0`, a trailing dot),
  IPv6 (including IPv4-mapped), and names that are local by definition (`localhost`,
  `*.localhost`, `*.internal`);
- at each delivery, on *every* address the host resolves to then (names in /etc/hosts, DNS
  that changed since), and the connection goes to the very address that was checked, so a
  second lookup cannot answer differently (DNS rebinding). Redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import trio

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Only digits, hex digits, `x` and dots can make an IPv4 literal in the resolver's legacy forms.
_LEGACY_IPV4 = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)


def refused_target(url: str, allow_private: bool) -> str | None:
    """Why `url` may not receive webhooks (the AddWebhook error), or None when it may.

    Host names that are not local by definition pass here; their addresses are checked at
    each delivery (see GuardedBackend).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError when the port is not a number in range
    except ValueError:
        return "Invalid URL format"
    if parts.scheme not in ("http", "https"):
        return "Webhook URL must use http or https protocol"
    host = (parts.hostname or "").lower()
    if not host:
        return "Invalid URL format"
    if allow_private:
        return None
    name = host[:-1] if host.endswith(".") else host  # `localhost.` is `localhost`
    if name == "localhost" or name.endswith(".localhost"):
        return "Webhook URL cannot point to localhost"
    if name in ("metadata", "instance-data") or name.endswith(".internal"):
        return "Webhook URL cannot point to cloud metadata endpoints"
    address = literal_address(name)
    if address is None:
        return None
    kind = address_kind(address)
    return None if kind is None else refusal(kind)


def refusal(kind: str) -> str:
    """The error text for an address of this kind."""
    if kind == "metadata":
        return "Webhook URL cannot point to cloud metadata endpoints"
    return f"Webhook URL cannot point to {kind} IP"


def literal_address(host: str) -> Address | None:
    """The address a host written as an IP literal stands for, or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not _LEGACY_IPV4.fullmatch(host):
        return None
    try:
        # inet_aton reads the forms a URL host can smuggle in: 127.1, 2130706433,
        # 0x7f000001, 017700000001 and 0 (they all connect somewhere local).
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def address_kind(address: Address) -> str | None:
    """Why a webhook may not go to this address ("loopback", "private", ...), or None when
    it is globally routable."""
    if address in METADATA_ADDRESSES:
        return "metadata"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and (kind := address_kind(embedded)) is not None:
            return kind
    for refused, kind in (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_reserved, "reserved"),
        # is_global is False for private, CGNAT (100.64/10), unique-local (fc00::/7),
        # documentation, benchmarking and IPv4-mapped ranges.
        (address.is_private or not address.is_global, "private"),
    ):
        if refused:
            return kind
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


class RefusedTarget(httpcore.ConnectError):
    """A delivery whose host resolves to an address webhooks may not reach."""


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to now, in the resolver's order, without repeats."""
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.TrioBackend):
    """httpcore's Trio network backend, connecting only to addresses the guard allows.

    It resolves the host once, checks every address (one refused address refuses the
    delivery: which one a client gets is the resolver's choice), then connects to those
    checked addresses by number, so nothing resolves the name a second time.
    """

    def __init__(self, allow_private: bool, resolver: Resolver = resolve) -> None:
        self.allow_private = allow_private
        self.resolver = resolver

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore calls it so
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Open a TCP connection to a checked address of `host`."""
        addresses = await self.resolver(host, port)
        if not addresses:
            raise httpcore.ConnectError(f"{host} has no address")
        if not self.allow_private:
            for address in addresses:
                kind = _kind_of(address)
                if kind is not None:
                    raise RefusedTarget(f"{host} resolves to {address} ({kind})")
        error: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await super().connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error


def _kind_of(address: str) -> str | None:
    try:
        return address_kind(ipaddress.ip_address(address))
    except ValueError:  # not a number (an unexpected resolver answer): never connect to it
        return "unknown"
