from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.models import Agent
from trust.interchange.selectors import agent_export


class Command(BaseCommand):
    help = "Export agents' trust memory as per-agent documents (<Agent>.json)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug")
        parser.add_argument("--agent", action="append", help="Agent name (default: all)")
        parser.add_argument(
            "--output", type=Path, help="Folder to write <Agent>.json into; stdout if omitted"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        agents = Agent.objects.filter(tenant__slug=options["tenant"]).order_by("name")
        if options["agent"]:
            agents = agents.filter(name__in=options["agent"])
            missing = set(options["agent"]) - {agent.name for agent in agents}
            if missing:
                raise CommandError(f"No agent(s) {sorted(missing)} in '{options['tenant']}'.")
        folder: Path | None = options["output"]
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        for agent in agents:
            text = json.dumps(agent_export(agent=agent), indent=2, ensure_ascii=False)
            if folder is None:
                self.stdout.write(text)
            else:
                (folder / f"{agent.name}.json").write_text(text + "\n", encoding="utf-8")
                self.stdout.write(f"{agent.name}.json")
