"""``manage.py mcp``: the MCP server of clients/python (``ledgered-memory-mcp``, in
ledgered_memory.mcp_cli), one command away from the service. It talks to the service over its
HTTP API with an agent-scoped key, so it needs neither the database nor this process's Django
state (manage.py does not start the embedded PostgreSQL for it)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Run the MCP server (stdio or streamable HTTP) exposing one agent's memory tools. "
        "Authenticate with an agent-scoped key: $AGENT_MEMORY_API_KEY or --api-key; the service "
        "URL is $AGENT_MEMORY_URL or --url (default http://127.0.0.1:8000)."
    )

    requires_system_checks: list[str] = []  # it serves tools; the service checks itself

    def add_arguments(self, parser: CommandParser) -> None:
        from ledgered_memory.mcp_cli import add_arguments

        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        from ledgered_memory.mcp_cli import StartupError, run

        try:
            run(
                transport=options["transport"],
                url=options["url"],
                api_key=options["api_key"],
                host=options["host"],
                port=options["port"],
            )
        except StartupError as exc:  # service down, key missing, wrong or tenant-wide
            raise CommandError(str(exc)) from exc
