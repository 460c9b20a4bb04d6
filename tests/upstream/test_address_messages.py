"""The upstream address guard's details (routing.config.addresses): how a host is normalised before it is
judged (brackets, IPv6 zone, trailing dot), that private addresses are allowed when the setting is absent,
and the exact refusal messages an operator reads."""

from __future__ import annotations

import pytest

from routing.config.addresses import address_problem, host_address, host_problem, normal_host, url_problem


@pytest.mark.parametrize(
    ("host", "normal"),
    [
        ("[::1]", "::1"),
        ("[FE80::1%25eth0]", "fe80::1"),  # brackets and a percent-encoded zone dropped
        ("fe80::1%eth0%x", "fe80::1"),  # everything from the first %
        ("[::1", "[::1"),  # an unbalanced bracket is not stripped
        ("::1]", "::1]"),
        ("BOX.", "box"),  # the trailing dot, and only it
        ("Metadata.Google.Internal.", "metadata.google.internal"),
    ],
)
def test_a_host_is_judged_as_the_resolver_reads_it(host, normal) -> None:
    assert normal_host(host) == normal


def test_a_bracketed_link_local_address_with_a_zone_is_still_link_local() -> None:
    assert str(host_address("[fe80::1%25eth0]")) == "fe80::1"


def test_private_addresses_are_allowed_when_the_setting_is_absent(settings) -> None:
    del settings.SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE
    assert url_problem("http://10.0.0.1:8000/v1") is None
    assert url_problem("http://localhost:8000/v1") is None


def test_the_refusals_say_what_to_write_instead() -> None:
    assert host_problem("metadata.google.internal", True) == (
        "'metadata.google.internal' is the cloud metadata service's name, which is never an upstream: "
        "name the provider's own address"
    )
    assert address_problem(host_address("169.254.169.254"), True) == (
        "169.254.169.254 is in the link-local range where cloud metadata services answer "
        "(169.254.0.0/16, fe80::/10), which is never an upstream: name the provider's own address"
    )
