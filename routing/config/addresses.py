"""The upstream address guard: which hosts a base_url or a service account's token_uri may name
(docs/security.md#addresses).

The gateway calls whatever address its configuration names, with the provider's key. Two
kinds of address are refused:

- always: the link-local range, where cloud metadata services answer (169.254.0.0/16,
  fe80::/10, AWS's fd00:ec2::254, Alibaba's 100.100.100.200) and the metadata service's names
  (`metadata.google.internal`, `metadata`, `instance-data`). Whoever may edit a base_url could
  otherwise make the gateway fetch the machine's cloud credentials;
- with SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE=false: every address that is not globally routable
  (loopback, private, unique-local, CGNAT, unspecified), for deployments whose upstreams are
  all on the internet. The default (true) allows them: local models (Ollama, vLLM) live there.

A host is read the way the C resolver reads it, so another spelling of a refused address is
refused too: decimal (2852039166), hex (0xa9fea9fe), octal (0251.0376.0251.0376), short
forms (169.254.43518), IPv4-mapped IPv6 (::ffff:169.254.169.254), percent-encoded or
full-width digits, a trailing dot, any letter case. A DNS name is not resolved here: the
transport checks the addresses it resolves to (routing.upstream.transport).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_NAMES = frozenset({"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"})
METADATA_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32")
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # an IPv4 address inside the well-known NAT64 prefix
ALLOW_PRIVATE_SETTING = "SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE"
_NUMERIC_V4 = re.compile(r"[0-9][0-9a-fx.]*", re.IGNORECASE)  # what inet_aton may read as an IPv4 address


def private_allowed() -> bool:
    """SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE (default true)."""
    return bool(getattr(settings, ALLOW_PRIVATE_SETTING, True))


def normal_host(host: str) -> str:
    """The host as a resolver sees it: percent-decoded, NFKC (full-width digits), lower case, no brackets,
    IPv6 zone or trailing dot."""
    host = unicodedata.normalize("NFKC", unquote(host)).strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.split("%", 1)[0].rstrip(".")


def host_address(host: str) -> IPAddress | None:
    """The IP address a numeric host names in any spelling the C resolver accepts (None for a DNS name)."""
    host = normal_host(host)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not _NUMERIC_V4.fullmatch(host):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))  # 0x.., 0.., 2852039166, 169.254.43518
        except OSError:
            return None
    return embedded_v4(address)


def embedded_v4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped or NAT64 IPv6 address carries (the address itself otherwise)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_problem(address: IPAddress, allow_private: bool) -> str | None:
    """Why the gateway must not call `address` (None when it may)."""
    address = embedded_v4(address)
    if address.is_link_local or any(address in net for net in METADATA_NETWORKS):
        return (
            f"{address} is in the link-local range where cloud metadata services answer "
            "(169.254.0.0/16, fe80::/10), which is never an upstream: name the provider's own address"
        )
    if not allow_private and not address.is_global:
        return (
            f"{address} is a loopback or private address, refused while {ALLOW_PRIVATE_SETTING} is false: "
            f"name a public address, or set {ALLOW_PRIVATE_SETTING}=true"
        )
    return None


def host_problem(host: str, allow_private: bool) -> str | None:
    """Why the gateway must not call `host` (a name or an address in any spelling); None when it may."""
    name = normal_host(host)
    if name in METADATA_NAMES:
        return (
            f"{name!r} is the cloud metadata service's name, which is never an upstream: "
            "name the provider's own address"
        )
    if not allow_private and (name == "localhost" or name.endswith(".localhost")):
        return (
            f"{name!r} is a loopback name, refused while {ALLOW_PRIVATE_SETTING} is false: "
            f"name a public address, or set {ALLOW_PRIVATE_SETTING}=true"
        )
    address = host_address(name)
    return None if address is None else address_problem(address, allow_private)


def url_problem(url: Any, allow_private: bool | None = None) -> str | None:
    """Why the gateway must not call the host of `url` (None when it may, or when it is no URL: other rules
    say so). `allow_private` defaults to the setting."""
    if not isinstance(url, str):
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    return host_problem(host, private_allowed() if allow_private is None else allow_private)
