"""Data migrations of the ledger app, run against a database holding the rows they repair."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from config.database import database_as_owner
from ledger.models import ApiKey, Event, IdempotencyRecord, Role
from ledger.selectors import event_chain_verify
from ledger.services import agent_create, api_key_create, tenant_create
from tests.ledger.test_chain import append_n

BEFORE_ADMIN_KEYS_WERE_TENANT_WIDE = [("ledger", "0009_agent_name_key")]


def migrate(targets: list[tuple[str, str]]) -> None:
    # Schema changes are the owner's to make; the service's role may not (config/database.py).
    with database_as_owner():
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(targets)


@pytest.fixture
def before_issue_18(transactional_db: None) -> Iterator[None]:
    """The database as it was before migration 0010, and back to the latest afterwards."""
    migrate(BEFORE_ADMIN_KEYS_WERE_TENANT_WIDE)
    yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_agent_scoped_admin_keys_become_reviewer_keys_with_an_event(before_issue_18):
    tenant = tenant_create(name="Acme", slug="acme")
    alpha = agent_create(tenant=tenant, name="alpha", actor="system")
    append_n(tenant, 3, actor="alpha")
    # Made as an install could before: the rule is not in the database yet.
    scoped_admin, _ = api_key_create(
        tenant=tenant, name="a", role=Role.AGENT, agent=alpha, actor="x"
    )
    ApiKey.objects.filter(pk=scoped_admin.pk).update(role=Role.ADMIN)
    tenant_admin, _ = api_key_create(tenant=tenant, name="t", role=Role.ADMIN, actor="x")
    with connection.cursor() as cursor:  # a record of the old, tenant-wide shape
        cursor.execute(
            "INSERT INTO ledger_idempotencyrecord (tenant_id, key, fingerprint, created_at)"
            " VALUES (%s, 'k', 'f', now())",
            [tenant.pk],
        )
    head = Event.objects.filter(tenant=tenant).order_by("-seq").first()

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    scoped_admin.refresh_from_db()
    tenant_admin.refresh_from_db()
    assert (scoped_admin.role, tenant_admin.role) == (Role.REVIEWER, Role.ADMIN)
    logged = Event.objects.get(tenant=tenant, seq=head.seq + 1)
    assert (logged.kind, logged.actor) == ("api_key.role_changed", "system")
    assert logged.payload["key_id"] == scoped_admin.pk
    assert (logged.payload["from"], logged.payload["to"]) == ("admin", "reviewer")
    assert event_chain_verify(tenant=tenant).ok
    assert not IdempotencyRecord.objects.exists()
