"""An attacker with database access, for the tests that prove the ledger notices one.

The service's own role cannot change an event (tests/test_database_roles.py); these helpers sign
in as the owner of the tables, who can switch the append-only trigger off, and rewrite history as
someone holding the owner's password would. Rows must be committed first (``transaction=True``
tests): the owner's session cannot see the test's uncommitted transaction.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from django.db import connection
from psycopg.rows import dict_row

from config import database
from ledger.chain import event_hash
from ledger.models import Tenant


def owner_connection() -> psycopg.Connection[Any]:
    """A session as the owner of the tables, on this run's test database."""
    owner = database.database_owner_settings() or database.connection_fields()
    return psycopg.connect(
        host=owner["HOST"] or None,
        port=owner["PORT"] or None,
        user=owner["USER"],
        password=owner["PASSWORD"] or None,
        dbname=connection.settings_dict["NAME"],
        autocommit=True,
    )


def tamper(sql: str, params: list[Any]) -> None:
    """Run ``sql`` on ledger_event with its append-only trigger switched off, as the owner may."""
    tamper_all([(sql, params)])


def tamper_all(statements: list[tuple[str, list[Any]]]) -> None:
    """``tamper`` for several statements in one transaction."""
    with owner_connection() as owner, owner.transaction():
        # Deferred foreign-key checks of a DELETE would otherwise block ALTER TABLE below.
        owner.execute("SET CONSTRAINTS ALL IMMEDIATE")
        owner.execute("ALTER TABLE ledger_event DISABLE TRIGGER ledger_event_no_update_or_delete")
        for sql, params in statements:
            owner.execute(sql, params)
        owner.execute("ALTER TABLE ledger_event ENABLE TRIGGER ledger_event_no_update_or_delete")


def events_delete(where: str, params: list[Any]) -> None:
    """Delete the events ``where`` picks, and the rows derived from them, as an attacker removing
    events would (else the foreign key, not the ledger, refuses). One transaction that holds off
    the worker's inserts: between two, it could embed an event again and the delete fail."""
    tamper_all(
        [
            ("LOCK TABLE memory_eventembedding IN SHARE ROW EXCLUSIVE MODE", []),
            (
                # ``where`` is a literal of the calling test, its values are parameters.
                f"DELETE FROM memory_eventembedding WHERE event_id IN"  # noqa: S608
                f" (SELECT id FROM ledger_event WHERE {where})",
                params,
            ),
            (f"DELETE FROM ledger_event WHERE {where}", params),  # noqa: S608
        ]
    )


def rewrite_tail(tenant: Tenant, *, from_seq: int, payload: dict[str, Any]) -> None:
    """Forge event ``from_seq`` and recompute every hash from there to the head, so that the chain
    inside the database verifies again: what an attacker who knows the (public) hash format does.
    """
    with owner_connection() as owner, owner.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(
            "SELECT id, seq, run_id, round_id, turn, actor, kind, payload, created_at, prev_hash"
            " FROM ledger_event WHERE tenant_id = %s AND seq >= %s ORDER BY seq",
            [tenant.pk, from_seq],
        ).fetchall()
    prev_hash = rows[0]["prev_hash"]
    for row in rows:
        pk = row.pop("id")
        if row["seq"] == from_seq:
            row["payload"] = payload
        row["prev_hash"] = prev_hash
        digest = event_hash(tenant_id=tenant.pk, **row)
        tamper(
            "UPDATE ledger_event SET payload = %s::jsonb, prev_hash = %s, hash = %s WHERE id = %s",
            [json.dumps(row["payload"]), prev_hash, digest, pk],
        )
        prev_hash = digest
