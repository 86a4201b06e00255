"""`backup` and `restore` round-trip a tenant through one file (the embedded PostgreSQL)."""

from __future__ import annotations

import json
import os
import uuid
from io import StringIO

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from config import embedded
from config.supervisor import DataFolderLock
from ledger import services
from ledger.models import Event

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        bool(os.environ.get("DATABASE_URL")), reason="backup and restore serve the embedded server"
    ),
]


def _json_of(*args, **options):
    out = StringIO()
    call_command(*args, json=True, stdout=out, **options)
    return json.loads(out.getvalue())


@pytest.fixture
def scratch_database():
    name = f"restore_test_{uuid.uuid4().hex[:12]}"
    yield name
    with embedded._superuser_connection(settings.EMBEDDED) as connection:
        for database in (name, f"{name}_restoring"):
            connection.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _connect(database, role=embedded.SUPERUSER):
    return psycopg.connect(**settings.EMBEDDED.connect_kwargs(role, database), autocommit=True)


def test_a_tenant_survives_backup_and_restore(tenant, make_agent, tmp_path, scratch_database):
    make_agent(tenant, "Creator1")
    for turn in range(5):
        services.event_append(
            tenant=tenant, kind="note", actor="Creator1", payload={"text": f"t{turn}"}, turn=turn
        )
    chain = list(Event.objects.filter(tenant=tenant).order_by("seq").values_list("seq", "hash"))

    backup = _json_of("backup", output=tmp_path / "team.dump")
    restored = _json_of("restore", str(tmp_path / "team.dump"), into=scratch_database)

    assert backup["action"] == "backup"
    assert backup["bytes"] == (tmp_path / "team.dump").stat().st_size > 0
    assert backup["tables"] >= 20
    assert oct((tmp_path / "team.dump").stat().st_mode & 0o777) == "0o600"
    assert restored["database"] == scratch_database
    assert restored["tables"] == backup["tables"]
    with _connect(scratch_database) as connection:
        (tenant_id,) = connection.execute(
            "SELECT id FROM ledger_tenant WHERE slug = %s", [tenant.slug]
        ).fetchone()
        rows = connection.execute(
            "SELECT seq, hash FROM ledger_event WHERE tenant_id = %s ORDER BY seq", [tenant_id]
        ).fetchall()
        assert rows == chain
        assert connection.execute(
            "SELECT name FROM ledger_agent WHERE tenant_id = %s", [tenant_id]
        ).fetchall() == [("Creator1",)]
    # Privileges and the append-only trigger came along: the service's role reads, never edits.
    with _connect(scratch_database, embedded.APP_ROLE) as connection:
        count = connection.execute("SELECT count(*) FROM ledger_event").fetchone()
        assert count[0] >= len(chain)
        with pytest.raises(psycopg.Error):
            connection.execute("UPDATE ledger_event SET actor = 'forger'")
    assert not _database_exists(f"{scratch_database}_restoring")


def _database_exists(name):
    with embedded._superuser_connection(settings.EMBEDDED) as connection:
        return (
            connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            is not None
        )


def test_a_damaged_file_leaves_the_database_it_would_replace(tmp_path, scratch_database):
    _json_of("backup", output=tmp_path / "good.dump")
    _json_of("restore", str(tmp_path / "good.dump"), into=scratch_database)
    damaged = tmp_path / "damaged.dump"
    damaged.write_bytes((tmp_path / "good.dump").read_bytes()[:4096])

    with pytest.raises(CommandError):
        call_command("restore", str(damaged), into=scratch_database, stdout=StringIO())

    with _connect(scratch_database) as connection:
        assert connection.execute("SELECT count(*) FROM ledger_tenant").fetchone() is not None
    assert not _database_exists(f"{scratch_database}_restoring")


def test_restore_refuses_the_services_database_while_up_runs(tmp_path):
    lock = DataFolderLock(settings.DATA_DIR)
    assert lock.acquire()
    (tmp_path / "any.dump").write_bytes(b"")
    try:
        with pytest.raises(CommandError, match="already running"):
            call_command("restore", str(tmp_path / "any.dump"), stdout=StringIO())
    finally:
        lock.release()


def test_backup_points_an_external_database_at_its_own_tools(settings):
    settings.DATABASE_URL = "postgresql://app@db.internal/agent_memory"

    with pytest.raises(CommandError, match="point-in-time-recovery"):
        call_command("backup", stdout=StringIO())
