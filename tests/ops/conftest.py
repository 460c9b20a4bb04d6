"""Fixtures for the operate area: users, a small live snapshot, a fresh channel layer."""

from __future__ import annotations

import os

import pytest
from channels.layers import channel_layers

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current

DOCUMENT = {
    "providers": [
        {"name": "op-a", "dialect": "openai", "base_url": "http://127.0.0.1:9/v1"},
        {"name": "op-b", "dialect": "openai", "base_url": "http://127.0.0.1:9/v1"},
    ],
    "models": [
        {
            "id": "op-chat",
            "provider": "op-a",
            "upstream_model": "m1",
            "capabilities": ["chat"],
            "fallbacks": ["op-chat-b"],
            "input_price_per_mtok": 1.0,
            "output_price_per_mtok": 2.0,
        },
        {"id": "op-chat-b", "provider": "op-b", "upstream_model": "m2", "capabilities": ["chat"]},
    ],
    "aliases": {"op-fast": "op-chat"},
    "orgs": [{"name": "acme", "credentials": [{"provider": "op-a", "base_url": "http://127.0.0.1:9/v1"}]}],
}


@pytest.fixture
def snapshot():
    """Install a two-link snapshot as the live one; restore the previous one after."""
    previous = live.current()
    snap = build_snapshot(DOCUMENT, [], os.environ, version=3, config_version=7)
    live.swap(snap)
    for key in (("op-a", "op-chat"), ("op-b", "op-chat-b"), ("op-a", "op-chat", "org:acme")):
        current().breakers.reset(key)
    yield snap
    for key in (("op-a", "op-chat"), ("op-b", "op-chat-b"), ("op-a", "op-chat", "org:acme")):
        current().breakers.reset(key)
    live.swap(previous)


@pytest.fixture
def fresh_layer(settings):
    """A new in-memory channel layer per test (its queues belong to one event loop).

    In-memory even when REDIS_URL is set: these tests look inside the layer; the Redis
    layer is exercised end to end by the servers of tests/e2e in CI's PostgreSQL pass."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    own = current().feed
    own.outbox.clear()
    own.flush_loop = None
    own.viewers = 0
    yield
    channel_layers.backends.clear()
    own.flush_loop = None
    own.viewers = 0


@pytest.fixture
def staff_user(django_user_model):
    """A staff operator: may view the dashboard and act on breakers (the Operators group)."""
    from routing.ops.controls import ensure_operators_group

    user = django_user_model.objects.create_user("op-staff", password="pw-staff-123", is_staff=True)
    user.groups.add(ensure_operators_group())
    return user


@pytest.fixture
def viewer_user(django_user_model):
    """Staff without routing.control_breaker: may look, may not act."""
    return django_user_model.objects.create_user("op-viewer", password="pw-viewer-123", is_staff=True)


@pytest.fixture
def plain_user(django_user_model):
    return django_user_model.objects.create_user("op-plain", password="pw-plain-123")
