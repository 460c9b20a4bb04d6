#!/usr/bin/env python
"""Django's command-line utility for Switchboard."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except BrokenPipeError:
        # The reader went away (`config_history | head`): not an error of ours, no traceback.
        # Point stdout at /dev/null so the interpreter's last flush fails silently too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
