"""The service's database roles: who owns the schema, who the service connects as, and what the
second may do.

PostgreSQL lets a table's owner switch its triggers off (``ALTER TABLE ... DISABLE TRIGGER``) and
a superuser skip them (``SET session_replication_role = replica``); the ledger's append-only
guarantee is a trigger. So two roles:

- the **owner** (``DATABASE_MIGRATE_URL``, or the embedded ``agent_memory_owner``) owns the tables
  and runs the migrations, and nothing else;
- the **service** (``DATABASE_URL``, or the embedded ``agent_memory``) owns nothing, is no
  superuser, and holds SELECT and INSERT on the append-only tables and plain row access
  elsewhere: it cannot change or remove an event, nor switch the trigger off.

``migrate`` (ledger/management/commands/migrate.py) runs as the owner through
``database_as_owner`` and then applies ``app_role_privileges_grant``; ``database_role_problems``
tells the operator when the service's role can bypass the ledger's triggers anyway (an external
database with one role for both). docs/ledger.md has the threat model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from config.embedded import quote_identifier

# Tables whose rows are never changed or removed once written.
APPEND_ONLY_TABLES = ("ledger_event",)
# The triggers that refuse UPDATE, DELETE and TRUNCATE (ledger/migrations/0002).
LEDGER_TRIGGERS = ("ledger_event_no_update_or_delete", "ledger_event_no_truncate")
# What the owner's connection replaces in the service's; the database NAME stays (a test run has
# its own).
OWNER_CONNECTION_FIELDS = ("USER", "PASSWORD", "HOST", "PORT", "OPTIONS")


class Cursor(Protocol):
    """A Django cursor or a psycopg one."""

    def execute(self, query: Any, params: Any = ...) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


def database_owner_settings() -> dict[str, Any] | None:
    """The owner's connection settings, or None when the service's role does its own migrations."""
    owner: dict[str, Any] | None = settings.DATABASE_OWNER
    if owner is None or owner.get("USER") == settings.DATABASE_APP_ROLE:
        return None
    return owner


def connection_fields(alias: str = DEFAULT_DB_ALIAS) -> dict[str, Any]:
    """Who ``alias`` connects as, in the form ``database_connected_as`` takes."""
    return {key: connections[alias].settings_dict.get(key) for key in OWNER_CONNECTION_FIELDS}


@contextlib.contextmanager
def database_connected_as(fields: dict[str, Any], alias: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Connect ``alias`` with ``fields`` (user, password, host...) until the block ends.

    The connection is closed on the way in and out, so no statement of the block runs on the
    previous session and none after it on this one. Not for use inside a transaction.
    """
    connection = connections[alias]
    saved = connection_fields(alias)
    connection.close()
    connection.settings_dict.update({key: fields.get(key) for key in OWNER_CONNECTION_FIELDS})
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


@contextlib.contextmanager
def database_as_owner(alias: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Connect ``alias`` as the owner role until the block ends (as is, without a separate one)."""
    owner = database_owner_settings()
    if owner is None:
        yield
        return
    with database_connected_as(owner, alias):
        yield


def app_role_privileges_grant(cursor: Cursor, *, app_role: str, owner_role: str) -> None:
    """Give the service's role row access to every table, and only SELECT and INSERT on the
    append-only ones; tables the owner creates later get the same by default.

    Run as the owner (or a superuser on its behalf). Idempotent, and it also takes back anything
    granted beyond that before (a role that could UPDATE events loses it here).
    """
    app, owner = quote_identifier(app_role), quote_identifier(owner_role)
    statements = [
        f"GRANT USAGE ON SCHEMA public TO {app}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
        f"GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {app}",
    ]
    for statement in statements:
        cursor.execute(statement)
    for table in APPEND_ONLY_TABLES:
        cursor.execute("SELECT to_regclass(%s)", [f"public.{table}"])
        if cursor.fetchone()[0] is None:
            continue  # not migrated yet; the grant after the migration revokes
        cursor.execute(
            "REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER, MAINTAIN "
            f"ON {quote_identifier(table)} FROM {app}"
        )


@dataclass(frozen=True)
class RoleProblem:
    """A way the service's own database role could rewrite the ledger undetected by PostgreSQL."""

    code: str
    message: str


def database_role_problems(cursor: Cursor) -> list[RoleProblem]:
    """What the connection's role could do to the ledger that the triggers should prevent.

    Empty for the embedded default and for an external database set up as docs/operations.md
    describes. Reads catalogs only, so any role may run it.
    """
    cursor.execute(
        "SELECT current_user, r.rolsuper, c.oid IS NOT NULL,"
        " c.oid IS NOT NULL AND pg_has_role(current_user, c.relowner, 'MEMBER'),"
        " c.oid IS NOT NULL AND has_table_privilege(c.oid, 'UPDATE'),"
        " c.oid IS NOT NULL AND has_table_privilege(c.oid, 'DELETE'),"
        " c.oid IS NOT NULL AND has_table_privilege(c.oid, 'TRUNCATE'),"
        " has_parameter_privilege('session_replication_role', 'SET')"
        " FROM pg_roles r LEFT JOIN pg_class c ON c.oid = to_regclass('public.ledger_event')"
        " WHERE r.rolname = current_user"
    )
    row = cursor.fetchone()
    role, superuser, migrated, owns, update, delete, truncate, replica = row
    problems = []
    if superuser:
        problems.append(RoleProblem("superuser", f"The service connects as superuser {role!r}."))
    elif owns:
        problems.append(
            RoleProblem(
                "owns_ledger",
                f"The service's role {role!r} owns ledger_event (or may act as its owner), so it "
                "can switch the append-only triggers off.",
            )
        )
    rights = [name for name, held in (("UPDATE", update), ("DELETE", delete)) if held]
    rights += ["TRUNCATE"] if truncate else []
    if rights and not (superuser or owns):
        problems.append(
            RoleProblem(
                "may_rewrite_ledger",
                f"The service's role {role!r} holds {', '.join(rights)} on ledger_event.",
            )
        )
    if replica and not superuser:
        problems.append(
            RoleProblem(
                "may_skip_triggers",
                f"The service's role {role!r} may SET session_replication_role, which skips "
                "triggers.",
            )
        )
    if migrated:
        cursor.execute(
            "SELECT tgname, tgenabled FROM pg_trigger"
            " WHERE tgrelid = 'public.ledger_event'::regclass AND NOT tgisinternal"
        )
        states = dict(cursor.fetchall())
        for trigger in LEDGER_TRIGGERS:
            # "O" fires in normal sessions and "A" always; "D" is off, "R" fires only in replicas.
            if states.get(trigger) not in ("O", "A"):
                problems.append(
                    RoleProblem(
                        "trigger_off",
                        f"The append-only trigger {trigger} is "
                        f"{'missing' if trigger not in states else 'switched off'}.",
                    )
                )
    return problems


def database_role_warnings(alias: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``database_role_problems`` of the service's connection, as lines for an operator."""
    with connections[alias].cursor() as cursor:
        problems = database_role_problems(cursor)
    if not problems:
        return []
    return [
        *(f"WARNING: {problem.message}" for problem in problems),
        "WARNING: the ledger's database guard is weaker than it should be: anyone with this "
        "role's password can rewrite history, and only the checkpoints outside the database "
        "would notice. docs/operations.md says how to connect with a role of its own.",
    ]
