"""Where webhooks may go, as a rule over addresses (no network I/O): the SSRF policy.

AddWebhook checks a URL's host as written (`refused_target`); delivery
(broker/services/webhook_targets.py) checks every address a host resolves to with
`address_kind`. Kept in the engine so the engine's AddWebhook needs no HTTP code; see
broker/services/webhook_targets.py for the whole guard.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

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
