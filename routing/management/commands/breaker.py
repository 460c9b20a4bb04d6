"""`manage.py breaker reset|force-open PROVIDER MODEL [--org ORG] [--reason R] [--minutes N]`.

Breakers live in the serving processes' memory: this command performs the same control
as the dashboard's buttons (routing.ops.controls: validated against the configuration
in the database, broadcast on the "switchboard.control" channel-layer group, which every
serving process applies, and audited). That needs a shared channel layer (REDIS_URL);
with the in-memory default no serving process can hear it, and the command says so and
exits 1. A control that does not validate (no such link or organisation, bad minutes,
an invalid configuration) exits 2.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Reset or force open a circuit breaker in every serving process (needs REDIS_URL)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action", choices=["reset", "force-open"])
        parser.add_argument("provider")
        parser.add_argument("model")
        parser.add_argument("--org", help="The BYO-credential breaker of this organisation instead of the shared one.")
        parser.add_argument("--reason", default="", help="Why (recorded; shown on the dashboard).")
        parser.add_argument("--minutes", type=float, help="force-open: keep it open this long (default: until reset).")

    def handle(self, *args: Any, **options: Any) -> None:
        from routing.config import live
        from routing.core.breaker import BreakerKey
        from routing.ops import controls
        from routing.ops.dashboard import feed

        if not feed.shared_layer():
            raise CommandError(
                "No shared channel layer: serving processes cannot hear this command. "
                "Set REDIS_URL (the same as the servers'), or use the dashboard's buttons.",
                returncode=1,
            )
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
        except (live.InvalidConfiguration, controls.ControlError) as exc:
            raise CommandError(str(exc), returncode=2) from None
        self.stdout.write(f"{options['action']} sent for {key.link}")
