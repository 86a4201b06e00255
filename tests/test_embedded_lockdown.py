"""The embedded PostgreSQL lets in only our own processes, each role with its password, and a
data folder made by an older version (password-less ``trust``, a world-writable socket folder,
one superuser owning everything) is locked down on its next start."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from config import embedded
from config.embedded import APP_ROLE, OWNER_ROLE, SUPERUSER, EmbeddedLayout, EmbeddedServiceError

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="embedded PostgreSQL only"
)
ROLES = (SUPERUSER, OWNER_ROLE, APP_ROLE)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def connect(layout: EmbeddedLayout, role: str, password: str) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=str(layout.socket_dir), user=role, password=password, dbname="postgres"
    )


def test_the_socket_folder_is_closed_to_other_users():
    socket_dir = settings.EMBEDDED.socket_dir

    assert mode(socket_dir) == 0o700
    assert socket_dir.lstat().st_uid in {os.geteuid(), *_server_uid()}


def _server_uid() -> list[int]:
    if os.geteuid() != 0:
        return []
    import pwd

    return [pwd.getpwnam("embedded_postgres").pw_uid]


@pytest.mark.parametrize("role", ROLES)
def test_a_connection_without_the_password_is_refused(role):
    layout = settings.EMBEDDED

    with pytest.raises(psycopg.OperationalError, match="password"):
        connect(layout, role, "")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        connect(layout, role, "guessed")
    connect(layout, role, layout.role_password(role)).close()


def test_every_role_signs_in_with_its_password_and_nothing_else():
    text = (settings.EMBEDDED.pgdata / "pg_hba.conf").read_text()

    rules = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert rules == ["local all all scram-sha-256"]


def test_the_passwords_are_kept_where_only_we_can_read_them():
    folder = settings.EMBEDDED.credentials_dir

    assert mode(folder) == 0o700
    assert {path.name: mode(path) for path in folder.iterdir()} == dict.fromkeys(ROLES, 0o600)


def test_a_socket_folder_that_is_not_ours_is_refused(tmp_path):
    layout = EmbeddedLayout(tmp_path / "data")
    layout.data_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Made first by someone else, to receive our connections: a link to their folder.
    layout.socket_dir.symlink_to(elsewhere)

    with pytest.raises(EmbeddedServiceError, match="not a folder of ours"):
        embedded.postgres_start(layout)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder owned by another user")
def test_a_socket_folder_owned_by_another_user_is_refused(tmp_path):
    layout = EmbeddedLayout(tmp_path / "data")
    layout.socket_dir.mkdir(parents=True)
    os.chown(layout.socket_dir, 65534, 65534)  # nobody

    with pytest.raises(EmbeddedServiceError, match="not a folder of ours"):
        embedded.postgres_start(layout)


@pytest.mark.slow
def test_a_data_folder_made_by_the_old_version_is_locked_down_on_its_next_start(tmp_path):
    layout = EmbeddedLayout(tmp_path / "old")
    _old_version_start(layout)
    embedded.postgres_stop(layout)

    assert embedded.postgres_start(layout)
    try:
        assert mode(layout.socket_dir) == 0o700
        with pytest.raises(psycopg.OperationalError, match="password"):
            connect(layout, SUPERUSER, "")
        app = psycopg.connect(**layout.connect_kwargs(APP_ROLE), autocommit=True)
        with app:
            owner, may_insert, may_update, may_delete = (
                app.execute(
                    "SELECT relowner::regrole::text, has_table_privilege('ledger_event', 'INSERT'),"
                    " has_table_privilege('ledger_event', 'UPDATE'),"
                    " has_table_privilege('ledger_event', 'DELETE')"
                    " FROM pg_class WHERE relname = 'ledger_event'"
                ).fetchone()
                or (None,) * 4
            )
            function_owner = one(
                app,
                "SELECT proowner::regrole::text FROM pg_proc WHERE proname = 'ledger_old_function'",
            )
            assert one(app, "SELECT count(*) FROM ledger_event") == 1
        assert (owner, function_owner) == (OWNER_ROLE, OWNER_ROLE)
        assert (may_insert, may_update, may_delete) == (True, False, False)
        # A second start finds it all in place and changes nothing.
        assert not embedded.postgres_start(layout)
    finally:
        embedded.postgres_stop(layout)


def one(connection: psycopg.Connection[Any], sql: str) -> Any:
    row = connection.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _old_version_start(layout: EmbeddedLayout) -> None:
    """What the version before roles and passwords did, with a ledger table in its database."""
    user = embedded._postgres_system_user()
    layout.socket_dir.mkdir(parents=True)
    layout.socket_dir.chmod(0o777)
    embedded._make_reachable_for(layout.socket_dir, user)
    layout.pgdata.mkdir(parents=True)
    embedded._make_reachable_for(layout.pgdata, user)
    initdb = [embedded._postgres_bin("initdb"), "-D", str(layout.pgdata), "--auth=trust"]
    embedded._run_as(user, [*initdb, "--encoding=UTF8", "--locale=C.UTF-8", "-U", SUPERUSER])
    options = f"-h '' -k {layout.socket_dir} -c shared_buffers=32MB"
    pg_ctl = [embedded._postgres_bin("pg_ctl"), "-D", str(layout.pgdata), "-w", "-o", options]
    embedded._run_as(user, [*pg_ctl, "-l", str(layout.pgdata / "server.log"), "start"])
    host = str(layout.socket_dir)
    with psycopg.connect(host=host, user=SUPERUSER, dbname="postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {embedded.DATABASE_NAME}")
    with psycopg.connect(
        host=host, user=SUPERUSER, dbname=embedded.DATABASE_NAME, autocommit=True
    ) as connection:
        connection.execute("CREATE TABLE ledger_event (id bigint GENERATED ALWAYS AS IDENTITY)")
        connection.execute("INSERT INTO ledger_event DEFAULT VALUES")
        connection.execute(
            "CREATE FUNCTION ledger_old_function() RETURNS int LANGUAGE sql AS 'SELECT 1'"
        )
