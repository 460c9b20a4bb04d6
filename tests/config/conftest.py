"""Fixtures for configuration tests: a typical valid document, imported on demand, and an admin client."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

VALID: dict[str, Any] = {
    "resilience": {"max_retries": 2},
    "providers": [
        {
            "name": "local-a",
            "dialect": "openai",
            "base_url": "http://127.0.0.1:9001/v1",
            "api_key_env": "SWITCHBOARD_UPSTREAM_LOCAL_A",
        }
    ],
    "models": [
        {
            "id": "chat-a",
            "provider": "local-a",
            "upstream_model": "gpt-4o-mini",
            "capabilities": ["chat", "streaming", "tools"],
            "context_window": 128000,
            "fallbacks": ["chat-b"],
        },
        {"id": "chat-b", "provider": "local-a", "upstream_model": "gpt-4o", "capabilities": ["chat", "streaming"]},
    ],
    "aliases": {"fast": "chat-a"},
    "orgs": [
        {
            "name": "acme",
            "default_action": "allow",
            "agents": [{"name": "support-bot", "default_model": "fast"}],
            "policies": [
                {"pattern": "chat-*", "action": "allow", "priority": 10, "fallback_chain": ["chat-b"]},
                {"pattern": "*/*", "action": "deny", "priority": 100},
            ],
        }
    ],
}


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """A test database file of our own: other areas run their tests on this machine at the same time."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        db.setdefault("TEST", {})["NAME"] = str(settings.VAR_DIR / f"test-config-{os.getpid()}.sqlite3")


@pytest.fixture
def valid_doc() -> dict[str, Any]:
    return copy.deepcopy(VALID)


@pytest.fixture
def imported(db: None) -> dict[str, Any]:
    """The valid document, imported into the database."""
    from routing.config.store import import_document

    import_document(copy.deepcopy(VALID))
    return copy.deepcopy(VALID)


@pytest.fixture
def admin_client_(db: None, client: Any) -> Any:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests")
    client.force_login(user)
    return client


@pytest.fixture
def saved_signals() -> Any:
    from django.db.models.signals import post_delete, post_save

    log: list[tuple[str, str]] = []

    def on_save(sender: type, **kwargs: Any) -> None:
        log.append(("save", sender.__name__))

    def on_delete(sender: type, **kwargs: Any) -> None:
        log.append(("delete", sender.__name__))

    post_save.connect(on_save, weak=False)
    post_delete.connect(on_delete, weak=False)
    yield log
    post_save.disconnect(on_save)
    post_delete.disconnect(on_delete)
