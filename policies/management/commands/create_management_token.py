"""`manage.py create_management_token --name NAME [--scope read|write] [--org ORG] [--bodies]
[--expires-in 30d | --expires-at TIME]`: the new token alone on the last line (docs/management-api.md#tokens)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from policies.models import ManagementToken, Org
from policies.tokens import create_management_token

_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_LIFETIME = timedelta(days=3650)


def expiry(expires_in: str | None, expires_at: str | None, now: datetime) -> datetime | None:
    """When the token stops working: `--expires-in` (`90d`, `12h`, `30m`, `600s`) from now, or
    `--expires-at` (ISO 8601, naive: UTC), in the future and at most ten years away; neither: never."""
    if expires_in is not None:
        match = _DURATION.match(expires_in.strip())
        if match is None:
            raise CommandError(f"--expires-in {expires_in!r}: write a whole number and a unit: 90d, 12h, 30m, 600s")
        lifetime = timedelta(seconds=int(match[1]) * _UNIT_S[match[2]])
    elif expires_at is not None:
        try:
            at = datetime.fromisoformat(expires_at.strip())
        except ValueError:
            raise CommandError(f"--expires-at {expires_at!r}: write an ISO 8601 time: 2030-01-31T12:00:00Z") from None
        lifetime = (at if at.tzinfo else at.replace(tzinfo=UTC)) - now
        if lifetime <= timedelta(0):
            raise CommandError(f"--expires-at {expires_at!r} is in the past: a token that never works is no token")
    else:
        return None
    if lifetime > MAX_LIFETIME:  # checked before the sum, which could pass the year 9999
        raise CommandError("the expiry is more than ten years away: leave it out for a token that never expires")
    return now + lifetime


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
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--expires-in", help="Stop working after this long: 90d, 12h, 30m or 600s (default: never).")
        when.add_argument(
            "--expires-at", help="Stop working at this ISO 8601 time (naive: UTC), e.g. 2030-01-31T12:00Z."
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
        expires_at = expiry(options["expires_in"], options["expires_at"], timezone.now())
        token, plaintext = create_management_token(
            name=name, scope=options["scope"], org=org, bodies=options["bodies"], expires_at=expires_at
        )
        where = f"organisation {org.name}" if org else "every organisation"
        where += ", reads bodies" if token.bodies else ""
        where += f", expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else ", never expires"
        self.stdout.write(
            f"Management token {token.prefix}… '{name}' ({token.scope}, {where}). Store it now: only its hash is "
            "kept. Use it as 'Authorization: Bearer <token>' on /api/v1/."
        )
        self.stdout.write(plaintext)
