from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.api import ApiError
from config.progress import json_option_add, progress_bar, summary_write
from ledger.management.tenants import tenant_named, tenant_option_add
from ledger.services import SYSTEM_ACTOR
from trust.interchange.lines_import import tenant_import_lines


def _lines(path: Path) -> Iterator[str]:
    if str(path) == "-":
        yield from sys.stdin
        return
    with path.open(encoding="utf-8") as file:
        yield from file


def _line_total(path: Path) -> int | None:
    if str(path) == "-":
        return None
    with path.open("rb") as file:
        return sum(1 for _ in file)


class Command(BaseCommand):
    help = (
        "Import a JSON Lines export (export_jsonl) into a tenant, all of it or nothing; refused "
        "into a tenant that holds data unless --merge."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="The export; - reads stdin")
        tenant_option_add(parser)
        parser.add_argument(
            "--merge",
            action="store_true",
            help="Add to a tenant that already holds data (agents with trust history are "
            "refused, its rubric is kept)",
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(options["tenant"])
        path: Path = options["file"]
        if str(path) != "-" and not path.is_file():
            raise CommandError(f"No file {path}.")
        clock = time.monotonic()
        with progress_bar(total=_line_total(path), description="import", unit="line") as bar:
            try:
                summary = tenant_import_lines(
                    tenant=tenant,
                    lines=_lines(path),
                    actor=SYSTEM_ACTOR,
                    merge=options["merge"],
                    on_line=lambda _: bar.update(),
                )
            except ApiError as exc:
                raise CommandError(f"Nothing imported: {exc.detail}", returncode=1) from exc
        imported = dict(sorted(summary.imported.items()))
        summary_write(
            self,
            as_json=options["json"],
            summary={
                "seconds": round(time.monotonic() - clock, 3),
                "tenant": tenant.slug,
                "lines": summary.lines,
                "imported": imported,
                "skipped": dict(summary.skipped),
            },
            text=f"Imported {summary.lines} lines into {tenant.slug}: "
            + ", ".join(f"{n} {kind}" for kind, n in imported.items())
            + "".join(f"; skipped {n} {kind}" for kind, n in summary.skipped.items()),
        )
