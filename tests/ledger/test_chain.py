from __future__ import annotations

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from ledger.models import Event, Tenant
from ledger.selectors import event_chain_verify
from ledger.services import EventDraft, event_append, events_append
from tests.concurrency import run_concurrently
from tests.tampering import events_delete, owner_connection, tamper


def append_n(tenant: Tenant, count: int, actor: str = "Creator1") -> list[Event]:
    return events_append(
        tenant=tenant,
        drafts=[
            EventDraft(kind="agent.spoke", actor=actor, payload={"text": f"line {i}"}, turn=i)
            for i in range(count)
        ],
    )


@pytest.mark.django_db
def test_events_are_numbered_and_chained_per_tenant(tenant, other_tenant):
    first = event_append(tenant=tenant, kind="run.started", actor="system", run_id="r1")
    elsewhere = event_append(tenant=other_tenant, kind="run.started", actor="system")
    second = event_append(tenant=tenant, kind="agent.spoke", actor="Creator1", run_id="r1")

    # tenant_create wrote seq 1 in each tenant.
    assert (first.seq, second.seq, elsewhere.seq) == (2, 3, 2)
    assert second.prev_hash == first.hash
    assert event_chain_verify(tenant=tenant).ok
    assert event_chain_verify(tenant=other_tenant).ok


@pytest.mark.django_db
def test_payloads_that_jsonb_rewrites_still_verify(tenant):
    event_append(
        tenant=tenant,
        kind="world.observed",
        actor="system",
        payload={"big": 1e20, "small": 1.5e-7, "text": "naïve ✓", "nested": {"b": [1, 2.50]}},
    )

    assert event_chain_verify(tenant=tenant).ok


@pytest.mark.django_db
def test_a_payload_with_a_nul_character_is_refused_before_anything_is_written(tenant):
    before = Event.objects.count()

    with pytest.raises(Exception, match="NUL"):
        event_append(tenant=tenant, kind="x", actor="system", payload={"text": "a\u0000b"})

    assert Event.objects.count() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_event SET actor = 'mallory'",
        "DELETE FROM ledger_event",
        "TRUNCATE ledger_event CASCADE",
    ],
)
def test_the_service_may_not_rewrite_events(tenant, statement):
    with (
        pytest.raises(DatabaseError, match="permission denied"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)

    assert Event.objects.filter(tenant=tenant, actor="mallory").count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_event SET actor = 'mallory'",
        "DELETE FROM ledger_event",
        "TRUNCATE ledger_event CASCADE",
    ],
)
def test_the_trigger_refuses_even_the_owner_of_the_table(tenant, statement):
    with pytest.raises(psycopg.DatabaseError, match="append-only"), owner_connection() as owner:
        owner.execute(statement)

    assert Event.objects.filter(tenant=tenant).exists()


@pytest.mark.django_db
def test_the_orm_cannot_update_or_delete_events_either(tenant):
    event = Event.objects.get(tenant=tenant, seq=1)
    event.actor = "mallory"

    with pytest.raises(DatabaseError), transaction.atomic():
        event.save()
    with pytest.raises(DatabaseError), transaction.atomic():
        Event.objects.filter(pk=event.pk).delete()


@pytest.mark.django_db(transaction=True)
def test_verify_names_the_first_tampered_event(tenant):
    events = append_n(tenant, 5)
    target = events[2]

    tamper(
        "UPDATE ledger_event SET payload = %s::jsonb WHERE id = %s",
        ['{"text": "forged"}', target.pk],
    )
    report = event_chain_verify(tenant=tenant)

    assert not report.ok
    assert (report.code, report.first_broken_seq) == ("hash_mismatch", target.seq)
    assert "hash" in report.reason


@pytest.mark.django_db(transaction=True)
def test_verify_notices_a_deleted_event(tenant):
    events = append_n(tenant, 4)

    events_delete("id = %s", [events[1].pk])
    report = event_chain_verify(tenant=tenant)

    assert not report.ok
    assert (report.code, report.first_broken_seq) == ("event_missing", events[1].seq)


@pytest.mark.django_db(transaction=True)
def test_verify_notices_a_rehashed_event_by_its_successor(tenant):
    """Recomputing a forged event's own hash still breaks the next event's prev_hash link."""
    events = append_n(tenant, 3)
    target = events[0]
    tamper("UPDATE ledger_event SET hash = %s WHERE id = %s", ["f" * 64, target.pk])

    report = event_chain_verify(tenant=tenant)

    assert (report.code, report.first_broken_seq) == ("hash_mismatch", target.seq)


@pytest.mark.django_db(transaction=True)
def test_concurrent_appenders_never_fork_the_chain(tenant):
    writers, per_writer = 6, 25

    def write(index: int) -> None:
        for _ in range(per_writer):
            event_append(tenant=tenant, kind="agent.spoke", actor=f"Writer{index}")

    run_concurrently(write, writers)

    seqs = list(Event.objects.filter(tenant=tenant).values_list("seq", flat=True))
    assert seqs == list(range(1, writers * per_writer + 2))
    assert event_chain_verify(tenant=tenant).ok
