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

The rule over addresses is the engine's (engine/rules/webhook_policy.py, no I/O); this module is the
delivery half: resolving, and connecting only to the addresses checked.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore
import trio

from ..engine.rules.webhook_policy import address_kind, refused_target

__all__ = ["GuardedBackend", "RefusedTarget", "Resolver", "refused_target", "resolve"]

Resolver = Callable[[str, int], Awaitable[list[str]]]


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
