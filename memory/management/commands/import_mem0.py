from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.api import ApiError
from config.progress import json_option_add, progress_bar, summary_write
from ledger.management.tenants import tenant_named, tenant_option_add
from ledger.services import SYSTEM_ACTOR
from memory.episodic.mem0 import mem0_memories_import, mem0_records


class Command(BaseCommand):
    help = (
        "Import mem0's memories (the JSON its get_all returns) into a tenant: new ones only, "
        "all or nothing (docs/integrations.md#moving-from-mem0)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="mem0's get_all answer, as JSON")
        tenant_option_add(parser)
        parser.add_argument(
            "--agent",
            help="The agent every memory goes to (created if missing); without it, each "
            "record's agent_id names its agent",
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(options["tenant"])
        path: Path = options["file"]
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise CommandError(f"{path} is not JSON: {exc}") from exc
        clock = time.monotonic()
        try:
            total = len(mem0_records(document))
            with progress_bar(total=total, description="mem0", unit="memory") as bar:
                summary = mem0_memories_import(
                    tenant=tenant,
                    document=document,
                    actor=SYSTEM_ACTOR,
                    agent=options["agent"],
                    on_step=bar.update,
                )
        except ApiError as exc:
            raise CommandError(f"Nothing imported: {exc.detail}", returncode=1) from exc
        created = summary.agents_created
        summary_write(
            self,
            as_json=options["json"],
            summary={
                "seconds": round(time.monotonic() - clock, 3),
                "tenant": tenant.slug,
                "records": summary.records,
                "imported": summary.imported,
                "already_imported": summary.already_imported,
                "expired": summary.expired,
                "agents_created": created,
            },
            text=f"{summary.records} mem0 records: {summary.imported} imported, "
            f"{summary.already_imported} already here, {summary.expired} expired"
            + (f"; new agents: {', '.join(created)}" if created else ""),
        )
