"""The upstream address guard (docs/security.md#addresses): the cloud metadata range is never called,
in any spelling; loopback and private addresses only while SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE is true.
Enforced by the configuration's validation, again by the transport, and before a token exchange."""

from __future__ import annotations

import copy
import json
import socket
import threading

import pytest

from routing.config.addresses import url_problem
from routing.config.validation import validate_document
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.dialects import vertex
from tests.config.conftest import VALID
from tests.upstream.conftest import provider

METADATA_SPELLINGS = [
    "169.254.169.254",  # dotted
    "2852039166",  # decimal
    "0xa9fea9fe",  # hex
    "0xA9FEA9FE",
    "0251.0376.0251.0376",  # octal
    "0xa9.0xfe.0xa9.0xfe",  # dotted hex
    "169.254.43518",  # short form
    "169.16689662",
    "[::ffff:169.254.169.254]",  # IPv4-mapped IPv6
    "[::ffff:a9fe:a9fe]",
    "[64:ff9b::a9fe:a9fe]",  # NAT64
    "[fe80::1]",  # IPv6 link-local
    "[fe80::1%25eth0]",  # with a zone
    "[fd00:ec2::254]",  # AWS's IPv6 metadata address
    "100.100.100.200",  # Alibaba's
    "%31%36%39.254.169.254",  # percent-encoded
    "１６９.２５４.１６９.２５４",  # full-width digits (IDNA folds them)
    "169.254.169.254.",  # trailing dot
    "169.254.0.1",  # anywhere in the range
    "metadata.google.internal",
    "METADATA.Google.Internal.",
    "metadata",
    "instance-data",
]
PRIVATE = [
    "127.0.0.1",
    "127.1",
    "0x7f000001",
    "2130706433",
    "0177.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "0.0.0.0",
    "[::1]",
    "[::]",
    "[fd12:3456::1]",
    "[::ffff:127.0.0.1]",
    "localhost",
    "api.localhost",
]
PUBLIC = [
    "api.openai.com",
    "8.8.8.8",
    "[2001:4860:4860::8888]",
    "decaf.example",
    "1e100.net",
    "bedrock-runtime.us-east-1.amazonaws.com",
]


@pytest.mark.parametrize("host", METADATA_SPELLINGS)
@pytest.mark.parametrize("allow_private", [True, False])
def test_the_metadata_range_is_refused_in_every_spelling(host, allow_private):
    problem = url_problem(f"http://{host}:80/v1", allow_private)
    assert problem is not None and "never an upstream" in problem


@pytest.mark.parametrize("host", PRIVATE)
def test_loopback_and_private_addresses_are_allowed_by_default_and_refused_when_turned_off(host):
    assert url_problem(f"http://{host}:8000/v1", True) is None
    problem = url_problem(f"http://{host}:8000/v1", False)
    assert problem is not None and "SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE" in problem


@pytest.mark.parametrize("host", PUBLIC)
def test_public_names_and_addresses_pass(host):
    assert url_problem(f"https://{host}/v1", False) is None


def _with_base_url(url: str) -> dict:
    doc = copy.deepcopy(VALID)
    doc["providers"][0]["base_url"] = url
    return doc


def test_validation_refuses_a_metadata_base_url_and_by_the_setting_a_private_one(settings):
    errors = validate_document(_with_base_url("http://0xa9fea9fe/latest/meta-data"))
    assert [e.path for e in errors] == ["providers[local-a].base_url"]
    assert "link-local" in errors[0].message
    assert validate_document(_with_base_url("http://127.0.0.1:9001/v1")) == []
    settings.SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE = False
    errors = validate_document(_with_base_url("http://127.0.0.1:9001/v1"))
    assert [e.path for e in errors] == ["providers[local-a].base_url"] and "ALLOW_PRIVATE" in errors[0].message


async def test_the_transport_never_calls_a_refused_address_that_bypassed_validation(transport):
    # The URL's own host counts (an org credential's or a deployment's base_url), not only the provider's.
    spec = provider(base_url="http://127.0.0.1:9/v1")
    with pytest.raises(UpstreamFailure) as info:
        await transport.send(spec, "GET", "http://2852039166/latest/meta-data", {}, None, 1.0)
    assert info.value.kind is FailureKind.UPSTREAM_4XX and info.value.status == 403
    assert not info.value.is_provider_fault
    assert "169.254" not in info.value.message and "2852039166" not in info.value.message
    assert "address guard" in info.value.message


async def test_a_token_uri_in_the_metadata_range_is_never_exchanged():
    calls = []
    tokens = vertex.ServiceAccountTokens(exchange=lambda info: calls.append(info) or ("ya29.x", 3600.0))
    sa = json.dumps({"client_email": "a@b", "private_key": "k", "token_uri": "http://metadata.google.internal/token"})
    with pytest.raises(UpstreamFailure) as info:
        await tokens.token(sa, "vx")
    assert calls == [] and info.value.status == 401 and "metadata" not in info.value.message
    fine = json.dumps({"client_email": "a@b", "private_key": "k", "token_uri": "http://127.0.0.1:9/token"})
    assert await tokens.token(fine, "vx") == "ya29.x" and len(calls) == 1


def _resolving_to(address: str, seen: list[str] | None = None):
    def lookup(host, port, *rest):
        if seen is not None:
            seen.append(threading.current_thread().name)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    return lookup


async def test_a_name_that_resolves_into_the_metadata_range_is_not_connected_to(transport):
    transport.lookup = _resolving_to("169.254.169.254")
    spec = provider(base_url="http://innocent.example:80/v1")
    with pytest.raises(UpstreamFailure) as info:
        await transport.send(spec, "GET", "http://innocent.example:80/v1/models", {}, None, 2.0)
    assert info.value.kind is FailureKind.CONNECT_ERROR and "address guard" in info.value.message
    assert "169.254" not in info.value.message and "innocent.example" not in info.value.message


async def test_upstream_names_are_looked_up_on_the_resolve_pool_not_the_loops_default_pool(transport, mock):
    seen: list[str] = []
    transport.lookup = _resolving_to("127.0.0.1", seen)
    port = mock.root.rsplit(":", 1)[1]
    spec = provider(base_url=f"http://upstream.test:{port}/v1")
    response = await transport.send(spec, "GET", f"http://upstream.test:{port}/v1/models", {}, None, 2.0)
    await response.close()
    assert seen and all(name.startswith("switchboard-resolve") for name in seen)
