#!/usr/bin/env python
"""Django's command-line utility for Agent Memory."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    _start_embedded_database(sys.argv[1:2])
    execute_from_command_line(sys.argv)


def _start_embedded_database(command: list[str]) -> None:
    """With no DATABASE_URL, make sure the embedded PostgreSQL serves the data folder.

    ``up`` and ``services`` manage the servers themselves; every other command just needs the
    database to be there, as it would be with an external one.
    """
    # mcp talks to the service over HTTP: it needs no database of its own.
    if os.environ.get("DATABASE_URL") or command[:1] in (
        [], ["help"], ["up"], ["services"], ["mcp"]
    ):  # fmt: skip
        return
    from django.conf import settings

    from config.embedded import postgres_start

    if postgres_start(settings.EMBEDDED):
        print(
            f"Started the embedded PostgreSQL in {settings.EMBEDDED.pgdata} "
            "(stop it with: python manage.py services stop)",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
