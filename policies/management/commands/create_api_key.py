"""`manage.py create_api_key --org ORG --agent AGENT`: the new key alone on the last line (docs/commands.md#create_api_key)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug
from django.utils import timezone

from policies.keys import create_api_key
from policies.models import Agent, Org
from routing.config import recorder


class Command(BaseCommand):
    help = "Create an API key for an agent of an organisation and print it once."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", required=True, help="Organisation name.")
        parser.add_argument("--agent", required=True, help="Agent name within the organisation.")
        parser.add_argument("--label", default="", help="Free text to recognise the key later.")
        parser.add_argument("--expires-days", type=int, help="Expire the key after this many days (default: never).")
        parser.add_argument("--create-agent", action="store_true", help="Create the agent if it does not exist.")

    def handle(self, *args: Any, **options: Any) -> None:
        org = Org.objects.filter(name=options["org"]).first()
        if org is None:
            raise CommandError(
                f"organisation {options['org']!r} does not exist: create it in the admin "
                "(/admin/policies/org/add/) or add it under orgs: in a file and run import_config"
            )
        agent = Agent.objects.filter(org=org, name=options["agent"]).first()
        if agent is None:
            if not options["create_agent"]:
                raise CommandError(
                    f"agent {options['agent']!r} does not exist in organisation {org.name!r}: "
                    "pass --create-agent, add it in the admin, or add it under the org's agents: and run import_config"
                )
            try:
                validate_slug(options["agent"])
            except ValidationError as exc:
                raise CommandError(f"agent name {options['agent']!r}: use letters, digits, '-' or '_'") from exc
            # A new agent changes the configuration: its history names who ran the command, as import_config's does.
            with recorder.change(author=recorder.command_author(), source="create_api_key", note="--create-agent"):
                agent = Agent.objects.create(org=org, name=options["agent"])
            self.stdout.write(f"Created agent {agent}.")
        expires_days = options["expires_days"]
        if expires_days is not None and expires_days <= 0:
            raise CommandError("--expires-days must be a positive number of days")
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        key, plaintext = create_api_key(agent=agent, label=options["label"], expires_at=expires_at)
        expiry = f"expires {key.expires_at:%Y-%m-%d %H:%M} UTC" if key.expires_at else "does not expire"
        self.stdout.write(
            f"API key {key.prefix}… for {agent} ({expiry}). Store it now: only its hash is kept, "
            "it cannot be shown again. Use it as 'Authorization: Bearer <key>'."
        )
        self.stdout.write(plaintext)
