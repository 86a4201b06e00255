from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.api import ApiError
from ledger.models import Tenant
from ledger.services import SYSTEM_ACTOR
from trust.interchange.services import agent_import


class Command(BaseCommand):
    help = "Import a folder of per-agent trust documents (<Agent>.json) into a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug")
        parser.add_argument("folder", type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant '{options['tenant']}'.")
        folder: Path = options["folder"]
        files = sorted(folder.glob("*.json"))
        if not files:
            raise CommandError(f"No .json files in {folder}.")
        failed = []
        for file in files:
            # Each agent is its own transaction: one bad file does not undo the others.
            try:
                document = json.loads(file.read_text(encoding="utf-8"))
                agent = agent_import(tenant=tenant, document=document, actor=SYSTEM_ACTOR)
            except (ValueError, ApiError) as exc:
                failed.append(file.name)
                self.stderr.write(f"{file.name}: {exc}")
                continue
            claimed = document.get("trust_score")
            # The score is computed from the evidence; a different claim is worth a look.
            note = "" if claimed in (None, agent.trust_score) else f"; the file said {claimed}"
            self.stdout.write(
                f"{file.name}: imported {agent.name} (trust {agent.trust_score}{note})"
            )
        if failed:
            raise CommandError(f"Not imported: {', '.join(failed)}", returncode=1)
