"""``python manage.py restore FILE``: the embedded PostgreSQL's database from a ``backup`` file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from config.backups import BackupError, backup_restore, backup_tables_count
from config.progress import json_option_add, progress_bar, summary_write
from config.supervisor import DataFolderLock, already_running_message
from ledger.management.commands.backup import embedded_database_name


class Command(BaseCommand):
    help = (
        "Replace the embedded PostgreSQL's database with a `backup` file. The file is loaded "
        "into a new database first; the old one is dropped only once it has loaded whole."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="A file written by `manage.py backup`")
        parser.add_argument(
            "--into",
            metavar="DATABASE",
            help="Restore into this database instead of the service's (a copy to inspect)",
        )
        json_option_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if not path.is_file():
            raise CommandError(f"No backup file at {path}.")
        service_database = embedded_database_name()
        database = options["into"] or service_database
        layout = settings.EMBEDDED
        lock = DataFolderLock(settings.DATA_DIR)
        # Replacing the database under a running service would cut its connections mid-request.
        if database == service_database and not lock.acquire():
            raise CommandError(f"{already_running_message(lock)} Stop it before a restore.")
        try:
            connections.close_all()
            with progress_bar(
                total=backup_tables_count(layout, path), description="restore", unit="table"
            ) as bar:
                report = backup_restore(
                    layout=layout, database=database, path=path, on_table=lambda _: bar.update()
                )
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if database == service_database:
                lock.release()
        said = (
            f"Restored {report.database} from {report.path} ({report.tables} tables) in "
            f"{report.seconds:.1f} s. Run `manage.py verify_ledger`: checkpoints signed after "
            "this backup was taken report its chains as truncated."
        )
        summary_write(self, as_json=options["json"], summary=report.as_dict(), text=said)
