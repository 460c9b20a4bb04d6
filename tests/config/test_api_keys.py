"""create_api_key: key alone on the last line, only its hash stored."""

from __future__ import annotations

import hashlib
import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from policies.keys import generate_key, hash_key
from policies.models import Agent, ApiKey

pytestmark = pytest.mark.django_db
KEY = re.compile(r"^sb-[A-Za-z0-9_-]{40}$")


def create(*args):
    out = io.StringIO()
    call_command("create_api_key", *args, stdout=out)
    return out.getvalue()


def test_generate_key_format():
    plaintext, prefix, digest = generate_key()
    assert KEY.match(plaintext) and prefix == plaintext[:10]
    assert digest == hashlib.sha256(plaintext.encode()).hexdigest() == hash_key(plaintext)
    assert generate_key()[0] != plaintext


def test_key_is_alone_on_the_last_line_and_only_its_hash_is_stored(imported):
    output = create("--org", "acme", "--agent", "support-bot", "--label", "ci", "--expires-days", "30")
    lines = output.rstrip("\n").split("\n")
    key = lines[-1]
    assert KEY.match(key) and len(lines) >= 2
    row = ApiKey.objects.get()
    assert row.key_hash == hash_key(key) and row.prefix == key[:10] and row.label == "ci" and row.expires_at
    stored = [str(v) for v in ApiKey.objects.values().get().values()]
    assert not any(key in v for v in stored)


def test_unknown_org_says_how_to_create_it(imported):
    with pytest.raises(CommandError, match="does not exist: create it in the admin"):
        create("--org", "nope", "--agent", "bot")


def test_unknown_agent_suggests_create_agent(imported):
    with pytest.raises(CommandError, match="pass --create-agent"):
        create("--org", "acme", "--agent", "new-bot")
    assert not ApiKey.objects.exists()
    key = create("--org", "acme", "--agent", "new-bot", "--create-agent").rstrip("\n").split("\n")[-1]
    assert ApiKey.objects.get(key_hash=hash_key(key)).agent == Agent.objects.get(name="new-bot")


def test_the_agent_created_by_the_command_is_recorded_as_its_user_not_system(imported, monkeypatch):
    """The configuration history names who ran `create_api_key --create-agent`, like import_config."""
    from routing.config import recorder
    from routing.models import ConfigRevision

    monkeypatch.setattr(recorder.getpass, "getuser", lambda: "alice")
    create("--org", "acme", "--agent", "hist-bot", "--create-agent")
    newest = ConfigRevision.objects.order_by("-version").first()
    assert (newest.author, newest.source) == ("alice", "create_api_key")
    assert "hist-bot" in str(newest.changes)
