from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.progress import json_option_add, progress_bar, summary_write
from ledger.management.tenants import tenant_named, tenant_option_add
from ledger.models import Agent
from trust.interchange.lines import ExportScope, export_line_count, export_lines


class Command(BaseCommand):
    help = (
        "Export a tenant, or one of its agents, as JSON Lines: agents with their trust record, "
        "memories, knowledge base, content items and rubric "
        "(docs/integrations.md#export-and-import)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        tenant_option_add(parser)
        parser.add_argument("--agent", help="Only this agent (its own rows)")
        parser.add_argument(
            "--output", type=Path, help="File to write; stdout (the document only) if omitted"
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(options["tenant"])
        agent = None
        if options["agent"]:
            agent = Agent.objects.filter(tenant=tenant, name=options["agent"]).first()
            if agent is None:
                raise CommandError(f"No agent '{options['agent']}' in '{tenant.slug}'.")
        output: Path | None = options["output"]
        if output is None and options["json"]:
            raise CommandError("--json needs --output: stdout carries the document.")
        clock = time.monotonic()
        scope = ExportScope(tenant=tenant, agent=agent)
        counts: dict[str, int] = {}
        with progress_bar(total=export_line_count(scope), description="export", unit="line") as bar:
            if output is None:
                self._write(scope, self.stdout, counts, bar.update)
            else:
                with output.open("w", encoding="utf-8", newline="\n") as file:
                    self._write(scope, file, counts, bar.update)
        if output is None:
            return
        lines = sum(counts.values())
        summary_write(
            self,
            as_json=options["json"],
            summary={
                "seconds": round(time.monotonic() - clock, 3),
                "tenant": tenant.slug,
                "agent": agent.name if agent else None,
                "output": str(output),
                "lines": lines,
                "bytes": output.stat().st_size,
                "counts": counts,
            },
            text=f"Exported {lines} lines to {output}: "
            + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())),
        )

    @staticmethod
    def _write(scope: ExportScope, out: Any, counts: dict[str, int], step: Any) -> None:
        for kind, line in export_lines(scope):
            counts[kind] = counts.get(kind, 0) + 1
            out.write(line + "\n")
            step()
