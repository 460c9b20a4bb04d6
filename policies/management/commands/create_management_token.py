"""`manage.py create_management_token --name NAME [--scope read|write] [--org ORG] [--bodies]`: the new token alone on the
last line (docs/management-api.md#tokens)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policies.models import ManagementToken, Org
from policies.tokens import create_management_token


class Command(BaseCommand):
    help = "Create a management API token and print it once."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="Who or what uses it; recorded as the author of its changes.")
        parser.add_argument("--scope", choices=["read", "write"], default="read", help="read-only (default) or write.")
        parser.add_argument("--org", help="Limit the token to this organisation (default: every organisation).")
        parser.add_argument(
            "--bodies", action="store_true", help="May read stored request/response bodies in GET /api/v1/requests."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"].strip()
        if not name or len(name) > 100:
            raise CommandError("--name must be 1 to 100 characters")
        if ManagementToken.objects.filter(name=name).exists():
            raise CommandError(f"a management token named {name!r} exists: pick another name")
        org = None
        if options["org"]:
            org = Org.objects.filter(name=options["org"]).first()
            if org is None:
                raise CommandError(f"organisation {options['org']!r} does not exist")
        token, plaintext = create_management_token(name=name, scope=options["scope"], org=org, bodies=options["bodies"])
        where = f"organisation {org.name}" if org else "every organisation"
        where += ", reads bodies" if token.bodies else ""
        self.stdout.write(
            f"Management token {token.prefix}… '{name}' ({token.scope}, {where}). Store it now: only its hash is "
            "kept. Use it as 'Authorization: Bearer <token>' on /api/v1/."
        )
        self.stdout.write(plaintext)
