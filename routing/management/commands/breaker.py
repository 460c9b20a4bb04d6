"""`manage.py breaker reset|force-open PROVIDER MODEL [--org ORG] [--reason R] [--minutes N]`.

Breakers live in the serving processes' memory: this command performs the same control
as the dashboard's buttons (routing.ops.controls: validated against the configuration
in the database, stored as the breaker's override — which bumps the configuration
version, so every serving process applies it within its poll interval, and processes
started later honour it — broadcast on the "switchboard.control" channel-layer group when
one is shared (REDIS_URL: applied at once), and audited). No Redis is needed. A control
that does not validate (no such link or organisation, bad minutes, an invalid
configuration) exits 2; a database that cannot store it exits 1.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from routing.config import live
from routing.core.breaker import BreakerKey
from routing.ops import controls


class Command(BaseCommand):
    help = "Reset or force open a circuit breaker in every serving process (stored in the database)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action", choices=["reset", "force-open"])
        parser.add_argument("provider")
        parser.add_argument("model")
        parser.add_argument("--org", help="The BYO-credential breaker of this organisation instead of the shared one.")
        parser.add_argument("--reason", default="", help="Why (recorded; shown on the dashboard).")
        parser.add_argument("--minutes", type=float, help="force-open: keep it open this long (default: until reset).")

    def handle(self, *args: Any, **options: Any) -> None:
        from django.db import DatabaseError

        key = BreakerKey(options["provider"], options["model"], options["org"])
        try:
            snapshot = live.load_snapshot()
            controls.apply(
                options["action"],
                key,
                f"cli:{getpass.getuser()}",
                options["reason"],
                options["minutes"],
                snapshot=snapshot,
                here=False,  # this process serves nothing: the serving processes apply it
            )
        except controls.ControlError as exc:
            raise CommandError(exc.for_cli(), returncode=2) from None
        except live.InvalidConfiguration as exc:
            raise CommandError(str(exc), returncode=2) from None
        except DatabaseError as exc:
            raise CommandError(f"could not store the control in the database: {exc}", returncode=1) from None
        self.stdout.write(
            f"{options['action']} stored for {key.link}; serving processes apply it within their poll interval"
        )
