"""The client address a record names (docs/production.md#client-address): one rule for everything that
records where a request came from (the audit log's logins, admin and API writes).

Behind a proxy the connection's peer (`REMOTE_ADDR`) is the proxy. `X-Forwarded-For` names the client only
when the peer is a proxy the operator declared (`SWITCHBOARD_TRUSTED_PROXIES`, addresses or networks):
then the header is read from the right, skipping the declared proxies that appended to it, and the first
address no declared proxy vouches for is the client. Anything further left was written by that client and
is not believed. A peer that is not declared gets its own address, whatever header it sends, so a client
talking to the gateway directly cannot forge its address. An entry that is not an address (`unknown`, a
name) stops the walk at the last hop known to be a declared proxy.

When uvicorn already put the client in `REMOTE_ADDR` (its `FORWARDED_ALLOW_IPS` trusting the proxy), the
peer is the client, not a declared proxy, and stays: the rule gives the same answer with either server.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_LEN = 64  # the audit record's column


def trusted_proxies(values: Iterable[str]) -> tuple[Network, ...]:
    """The declared proxies as networks (an address is a network of one); a bad entry raises ValueError."""
    return tuple(ipaddress.ip_network(str(v).strip(), strict=False) for v in values if str(v).strip())


def _address(text: str) -> Address | None:
    """An address of a forwarded hop: `a.b.c.d`, `a.b.c.d:port`, an IPv6 address, `[v6]` or `[v6]:port`."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _declared(address: Address | None, proxies: tuple[Network, ...]) -> bool:
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == net.version and address in net for net in proxies)


def forwarded_client(peer: str, forwarded_for: str, proxies: tuple[Network, ...]) -> str:
    """The client behind `peer` by the module's rule (`peer` itself unless it is a declared proxy)."""
    if not proxies or not forwarded_for or not _declared(_address(peer), proxies):
        return peer
    known = peer
    for hop in reversed(forwarded_for.split(",")):
        address = _address(hop)
        if address is None:
            return known
        if not _declared(address, proxies):
            return str(address)
        known = str(address)
    return known  # every hop a declared proxy: the farthest one


def client_address(request: Any) -> str:
    """The address of the client that sent `request` (a Django request; "" without one)."""
    meta = getattr(request, "META", None) or {}
    peer = str(meta.get("REMOTE_ADDR", ""))
    proxies = trusted_proxies(getattr(settings, "SWITCHBOARD_TRUSTED_PROXIES", ()))
    return forwarded_client(peer, str(meta.get("HTTP_X_FORWARDED_FOR", "")), proxies)[:MAX_LEN]
