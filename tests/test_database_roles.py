"""The service's database role cannot rewrite the ledger nor switch its guard off.

The tests run as the service's role (tests/conftest.py connects as it once the owner has made
the test database), so every statement here is what the running service, or anyone who took its
DATABASE_URL, could send. With an external database that has no separate owner role
(DATABASE_MIGRATE_URL unset) the service's role is the owner and these guarantees do not hold:
docs/operations.md says how to set one up.
"""

from __future__ import annotations

import os
import uuid
from io import StringIO

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from config.database import database_owner_settings, database_role_problems
from config.embedded import SUPERUSER
from tests.tampering import owner_connection

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        database_owner_settings() is None,
        reason="DATABASE_URL without DATABASE_MIGRATE_URL: the service's role owns the tables",
    ),
]


def test_the_service_connects_as_a_role_that_is_no_superuser_and_owns_nothing():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls,"
            " (SELECT count(*) FROM pg_class WHERE relowner = r.oid),"
            " (SELECT count(*) FROM pg_proc WHERE proowner = r.oid)"
            " FROM pg_roles r WHERE rolname = current_user"
        )
        role, superuser, createrole, createdb, bypassrls, relations, routines = cursor.fetchone()

    assert role == settings.DATABASE_APP_ROLE
    assert (superuser, createrole, createdb, bypassrls) == (False, False, False, False)
    assert (relations, routines) == (0, 0)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_event SET actor = 'mallory'",
        "DELETE FROM ledger_event",
        "TRUNCATE ledger_event CASCADE",
        # The ways around the append-only trigger: switch it off, skip it, replace or drop it.
        "ALTER TABLE ledger_event DISABLE TRIGGER ledger_event_no_update_or_delete",
        "ALTER TABLE ledger_event DISABLE TRIGGER ALL",
        "ALTER TABLE ledger_event ENABLE REPLICA TRIGGER ledger_event_no_update_or_delete",
        "SET session_replication_role = replica",
        "SET LOCAL session_replication_role = replica",
        "DROP TRIGGER ledger_event_no_update_or_delete ON ledger_event",
        "CREATE OR REPLACE FUNCTION ledger_event_refuse_change() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
        "DROP TABLE ledger_event CASCADE",
        # Or become someone who may.
        "SET ROLE agent_memory_owner",
        "SET ROLE postgres",
        "ALTER TABLE ledger_event OWNER TO CURRENT_USER",
        "ALTER ROLE CURRENT_USER SUPERUSER",
        "CREATE TABLE ledger_event_copy (id bigint)",
    ],
)
def test_the_service_role_cannot_change_events_or_unguard_them(statement):
    with (
        pytest.raises(DatabaseError, match=r"permission denied|must be owner|must be a member"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)


def test_the_service_role_cannot_grant_itself_the_right_to_rewrite():
    with connection.cursor() as cursor:
        # PostgreSQL only warns when a grant gives nothing: the proof is in the privileges.
        cursor.execute("GRANT UPDATE, DELETE, TRUNCATE ON ledger_event TO CURRENT_USER")
        cursor.execute(
            "SELECT has_table_privilege('ledger_event', 'UPDATE'),"
            " has_table_privilege('ledger_event', 'DELETE'),"
            " has_table_privilege('ledger_event', 'TRUNCATE'),"
            " has_table_privilege('ledger_event', 'INSERT')"
        )

        assert cursor.fetchone() == (False, False, False, True)


def test_the_start_up_check_finds_nothing_to_warn_about_for_the_service_role():
    with connection.cursor() as cursor:
        assert database_role_problems(cursor) == []


@pytest.mark.django_db(transaction=True)
def test_the_start_up_check_names_a_role_that_can_switch_the_trigger_off():
    with owner_connection() as owner, owner.cursor() as cursor:
        problems = database_role_problems(cursor)

    assert [problem.code for problem in problems] == ["owns_ledger"]


@pytest.mark.django_db(transaction=True)
def test_the_start_up_check_names_a_switched_off_trigger(tenant):
    with owner_connection() as owner:
        owner.execute("ALTER TABLE ledger_event DISABLE TRIGGER ledger_event_no_update_or_delete")
        try:
            with connection.cursor() as cursor:
                problems = database_role_problems(cursor)
        finally:
            owner.execute(
                "ALTER TABLE ledger_event ENABLE TRIGGER ledger_event_no_update_or_delete"
            )

    assert [problem.code for problem in problems] == ["trigger_off"]
    assert "ledger_event_no_update_or_delete" in problems[0].message


@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="needs the embedded superuser")
@pytest.mark.django_db(transaction=True)
def test_migrate_creates_a_missing_service_role_and_grants_it_only_row_access(settings):
    """As compose runs it: DATABASE_MIGRATE_URL names a role that may create roles, and the role
    of DATABASE_URL does not exist yet."""
    role = f"agent_memory_probe_{uuid.uuid4().hex[:8]}"
    layout = settings.EMBEDDED
    settings.DATABASE_OWNER = {
        **settings.DATABASE_OWNER,
        "USER": SUPERUSER,
        "PASSWORD": layout.role_password(SUPERUSER),
    }
    settings.DATABASE_APP_ROLE = role
    try:
        call_command("migrate", verbosity=0, stdout=StringIO())

        with owner_connection() as owner:
            attributes = owner.execute(
                "SELECT rolcanlogin, rolsuper,"
                " has_table_privilege(%(r)s, 'ledger_event', 'INSERT'),"
                " has_table_privilege(%(r)s, 'ledger_event', 'UPDATE'),"
                " has_table_privilege(%(r)s, 'ledger_agent', 'UPDATE')"
                " FROM pg_roles WHERE rolname = %(r)s",
                {"r": role},
            ).fetchone()
        assert attributes == (True, False, True, False, True)
    finally:
        with psycopg.connect(
            **layout.connect_kwargs(SUPERUSER, connection.settings_dict["NAME"]), autocommit=True
        ) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.mark.django_db(transaction=True)
def test_migrate_refuses_a_missing_service_role_the_owner_may_not_create(settings):
    settings.DATABASE_APP_ROLE = "agent_memory_nobody_made"

    with pytest.raises(CommandError, match="does not exist"):
        call_command("migrate", verbosity=0, stdout=StringIO())
