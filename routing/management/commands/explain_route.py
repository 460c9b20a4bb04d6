"""`manage.py explain_route --org ORG --model MODEL [--stream] [--tools] [--tokens N] [--json]`.

Shows how a request would be routed with the configuration now in the database:
alias resolution, the matching policy, and every link of the chain kept or skipped
and why, with the breaker states the serving processes share (docs/commands.md#explain_route).
Nothing is sent upstream.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config import live
from routing.core.kinds import ENDPOINT_KINDS
from routing.plan.explain import explain, render
from routing.runtime.cluster.breaker_sync import breaker_states


class Command(BaseCommand):
    help = "Explain how a request by an org for a model would be routed (policy, chain, skips)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", required=True, help="organisation name")
        parser.add_argument("--model", required=True, help="model id or alias the request would send")
        parser.add_argument("--stream", action="store_true", help="a streaming request")
        parser.add_argument("--tools", action="store_true", help="a request with tools")
        parser.add_argument("--tokens", type=int, default=None, help="estimated prompt tokens")
        parser.add_argument(
            "--kind",
            default="chat",
            choices=list(ENDPOINT_KINDS),
            help="endpoint kind (default chat)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            snapshot = live.load_snapshot()
        except live.InvalidConfiguration as exc:
            raise CommandError(str(exc)) from None
        if opts["tokens"] is not None and opts["tokens"] < 0:
            raise CommandError("--tokens must be 0 or more")
        try:
            result = explain(
                snapshot,
                opts["org"],
                opts["model"],
                opts["stream"],
                opts["tools"],
                opts["tokens"],
                kind=opts["kind"],
                states=breaker_states(snapshot, serving=False),
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        else:
            self.stdout.write(render(result))
