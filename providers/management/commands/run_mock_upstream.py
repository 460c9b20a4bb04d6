"""`manage.py run_mock_upstream --port 9001`: the scriptable mock upstream for demos and benchmarks."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand

from tools.mock.upstream import HOST, serve


class Command(BaseCommand):
    help = "Run the mock upstream (OpenAI, Anthropic, TEI, Cohere dialects) on 127.0.0.1 until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=9001, help="port to listen on (0: any free port)")
        parser.add_argument("--host", default=HOST, help="address to bind (default 127.0.0.1)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            asyncio.run(serve(options["port"], options["host"]))
        except KeyboardInterrupt:
            self.stdout.write("mock upstream stopped")
