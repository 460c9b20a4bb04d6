"""`manage.py breaker reset|force-open PROVIDER MODEL [--org ORG] [--reason R] [--minutes N]`.

Breakers live in the serving processes' memory, so this command does not touch them
directly: it publishes the same control message the dashboard sends on the
"switchboard.control" channel-layer group, which every serving process applies.
That needs a shared channel layer (REDIS_URL); with the in-memory default no
serving process can hear it, and the command says so and exits 1.
"""

from __future__ import annotations

import getpass
from typing import Any

from asgiref.sync import async_to_sync
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
        import os

        from channels.layers import get_channel_layer

        from routing.config.document import document_from_db, key_rows_from_db
        from routing.config.snapshot import build_snapshot
        from routing.ops import dashboard

        layer = get_channel_layer()
        if layer is None or type(layer).__name__ == "InMemoryChannelLayer":
            raise CommandError(
                "No shared channel layer: serving processes cannot hear this command. "
                "Set REDIS_URL (the same as the servers'), or use the dashboard's buttons.",
                returncode=1,
            )
        key = [options["provider"], options["model"]] + ([f"org:{options['org']}"] if options["org"] else [])
        snapshot = build_snapshot(document_from_db(), key_rows_from_db(), os.environ)
        try:
            control = dashboard.parse_control(
                {"action": options["action"], "key": key, "reason": options["reason"], "minutes": options["minutes"]},
                snapshot,
            )
        except dashboard.ControlError as exc:
            raise CommandError(str(exc), returncode=2) from None
        user = f"cli:{getpass.getuser()}"
        async_to_sync(layer.group_send)(
            dashboard.CONTROL_GROUP, {"type": "control.apply", "origin": f"cli:{os.getpid()}", "control": control}
        )
        dashboard._log_action(user, control)
        self.stdout.write(f"{options['action']} sent for {dashboard.link_name(tuple(key))}")
