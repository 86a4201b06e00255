"""A transaction asks PostgreSQL for a tenant's write lock once: later asks of the same
transaction cost no statement, for exactly as long as PostgreSQL keeps the lock."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger.models import Tenant
from ledger.services import tenant_write_lock

# Real commits: the fixtures' own writes take the lock, and inside a test's transaction they
# would still hold it.
pytestmark = pytest.mark.django_db(transaction=True)


def advisory_locks_held() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks"
            " WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
        )
        return int(cursor.fetchone()[0])


def statements_to_lock(tenant: Tenant) -> int:
    with CaptureQueriesContext(connection) as queries:
        tenant_write_lock(tenant)
    return len(queries)


def test_a_transaction_asks_once_and_the_next_transaction_asks_again(tenant, other_tenant):
    with transaction.atomic():
        assert statements_to_lock(tenant) == 1
        assert statements_to_lock(tenant) == 0
        with transaction.atomic():  # a nested block of the same transaction
            assert statements_to_lock(tenant) == 0
        assert statements_to_lock(other_tenant) == 1  # another tenant's lock is another lock
        assert advisory_locks_held() == 2

    assert advisory_locks_held() == 0  # released at commit
    with transaction.atomic():
        assert statements_to_lock(tenant) == 1
        assert advisory_locks_held() == 1


def test_a_rolled_back_transaction_forgets_the_lock(tenant):
    with transaction.atomic():
        tenant_write_lock(tenant)
        transaction.set_rollback(True)

    with transaction.atomic():
        assert statements_to_lock(tenant) == 1


def test_a_lock_taken_in_a_savepoint_rolled_back_is_asked_for_again(tenant):
    # PostgreSQL releases a lock taken after a savepoint when the savepoint is rolled back.
    with transaction.atomic():
        assert advisory_locks_held() == 0
        try:
            with transaction.atomic():
                assert statements_to_lock(tenant) == 1
                raise RuntimeError("the block fails")
        except RuntimeError:
            pass
        assert advisory_locks_held() == 0

        assert statements_to_lock(tenant) == 1
        assert advisory_locks_held() == 1


def test_a_lock_taken_in_a_savepoint_released_is_still_held(tenant):
    with transaction.atomic():
        with transaction.atomic():
            assert statements_to_lock(tenant) == 1

        assert advisory_locks_held() == 1
        assert statements_to_lock(tenant) == 0


def test_a_lock_taken_before_a_savepoint_rolled_back_stays_held(tenant):
    with transaction.atomic():
        tenant_write_lock(tenant)
        try:
            with transaction.atomic():
                raise RuntimeError("the block fails")
        except RuntimeError:
            pass

        assert advisory_locks_held() == 1
        assert statements_to_lock(tenant) == 0
