"""``python manage.py backup``: one file holding the embedded PostgreSQL's database."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from config.backups import BackupError, backup_create, tables_count
from config.progress import json_option_add, progress_bar, summary_write


def embedded_database_name() -> str:
    """The database the service uses, refused when it is not the embedded server's."""
    if settings.DATABASE_URL:
        raise CommandError(
            "DATABASE_URL is set: back up that PostgreSQL with its own tools (base backups and "
            "WAL archiving, docs/operations.md#point-in-time-recovery-for-external-postgresql). "
            "backup and restore serve the embedded server."
        )
    return str(connections["default"].settings_dict["NAME"])


class Command(BaseCommand):
    help = (
        "Write the embedded PostgreSQL's database to one file (pg_dump, custom format) while the "
        "service runs; `restore` puts it back."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output",
            type=Path,
            help="The file to write (default: <data dir>/backups/agent-memory-<UTC time>.dump)",
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        database = embedded_database_name()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = options["output"]
        if path is None:
            folder = settings.DATA_DIR / "backups"
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = folder / f"agent-memory-{stamp}.dump"
        layout = settings.EMBEDDED
        with progress_bar(
            total=tables_count(layout, database), description="backup", unit="table"
        ) as bar:
            try:
                report = backup_create(
                    layout=layout, database=database, path=path, on_table=lambda _: bar.update()
                )
            except BackupError as exc:
                raise CommandError(str(exc)) from exc
        said = (
            f"Backed up {report.database} ({report.tables} tables, {report.bytes:,} bytes) to "
            f"{report.path} in {report.seconds:.1f} s. Keep the data folder's keys with it "
            "(docs/operations.md#backups-and-upgrades)."
        )
        summary_write(self, as_json=options["json"], summary=report.as_dict(), text=said)
