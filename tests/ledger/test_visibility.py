"""What an agent may see of the ledger (SPEC 3.1, ledger.selectors): its own events, and the
others' public ones, where a reflection is public only when everything it was made from is."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from ledger.models import Agent, Event, RecallSettings, Tenant
from ledger.selectors import (
    DERIVED_KINDS,
    event_derived_from,
    event_visible_params,
    event_visible_sql,
    event_visible_to,
)
from ledger.services import EventDraft, events_append

pytestmark = pytest.mark.django_db

# Payloads a reflection can carry: what the service writes now, what it wrote before it
# recorded its sources, and what clients may append under the kind themselves.
REFLECTION_PAYLOADS: dict[str, dict[str, Any]] = {
    "of public kinds": {"summary": "s", "source_kinds": ["world.observed", "agent.spoke"]},
    "of a private kind": {"summary": "s", "source_kinds": ["agent.thought", "world.observed"]},
    "of nothing": {"summary": "s", "source_kinds": []},
    "of one public kind as a string": {"summary": "s", "source_kinds": "world.observed"},
    "of one private kind as a string": {"summary": "s", "source_kinds": "agent.thought"},
    "with a malformed record": {"summary": "s", "source_kinds": {"world.observed": 1}},
    "written before sources were recorded": {
        "summary": "s",
        "covers": {"from_seq": 1, "to_seq": 2, "events": 2},
    },
    "appended by a client": {"text": "my own reflection"},
}


def visible_by_sql(agent: Agent, settings: RecallSettings) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.id FROM ledger_event AS e WHERE e.tenant_id = %(tenant)s AND "  # noqa: S608
            + event_visible_sql("e"),  # a constant condition; every value is a parameter
            {"tenant": agent.tenant_id, **event_visible_params(agent=agent, settings=settings)},
        )
        return {row[0] for row in cursor.fetchall()}


def visible_by_orm(agent: Agent, settings: RecallSettings) -> set[int]:
    return set(
        Event.objects.filter(tenant=agent.tenant)
        .filter(event_visible_to(agent=agent, settings=settings))
        .values_list("id", flat=True)
    )


def reflection(tenant: Tenant, actor: str, payload: dict[str, Any]) -> Event:
    (event,) = events_append(
        tenant=tenant, drafts=[EventDraft(kind="agent.reflected", actor=actor, payload=payload)]
    )
    return event


@pytest.fixture
def cast(tenant, make_agent) -> tuple[Agent, Agent]:
    return make_agent(tenant, name="Alice"), make_agent(tenant, name="Bob")


@pytest.mark.parametrize(
    ("shape", "seen_by_peers"),
    [
        ("of public kinds", True),
        ("of a private kind", False),
        ("of nothing", True),
        ("of one public kind as a string", True),
        ("of one private kind as a string", False),
        ("with a malformed record", False),
        ("written before sources were recorded", False),
        ("appended by a client", True),
    ],
)
def test_a_reflection_is_seen_by_peers_only_when_its_sources_are_public(
    tenant, cast, shape, seen_by_peers
):
    alice, bob = cast
    event = reflection(tenant, "Alice", REFLECTION_PAYLOADS[shape])
    settings = RecallSettings.for_tenant(tenant)

    assert (event.pk in visible_by_orm(bob, settings)) is seen_by_peers
    assert (event.pk in visible_by_sql(bob, settings)) is seen_by_peers
    assert event.pk in visible_by_orm(alice, settings)
    assert event.pk in visible_by_sql(alice, settings)


def test_narrowing_the_visible_kinds_makes_reflections_of_them_private(tenant, cast):
    _, bob = cast
    event = reflection(tenant, "Alice", REFLECTION_PAYLOADS["of public kinds"])
    settings = RecallSettings.objects.create(
        tenant=tenant, globally_visible_kinds=["world.observed", "agent.reflected"]
    )

    # agent.spoke is private now: a reflection made of it is read as private from now on.
    assert event.pk not in visible_by_orm(bob, settings)
    assert event.pk not in visible_by_sql(bob, settings)


def test_the_orm_and_sql_spellings_of_the_rule_agree(tenant, cast, make_agent):
    make_agent(tenant, name="Carol")
    kinds = ["agent.thought", "agent.spoke", "world.observed", "clue.found", "agent.reflected"]
    drafts = [
        EventDraft(kind=kind, actor=actor, payload={"text": f"{kind} by {actor}"})
        for kind in kinds
        for actor in ("Alice", "Bob", "system")
    ]
    drafts += [
        EventDraft(kind="agent.reflected", actor=actor, payload=payload)
        for payload in REFLECTION_PAYLOADS.values()
        for actor in ("Alice", "Bob")
    ]
    events_append(tenant=tenant, drafts=drafts)
    narrowed = RecallSettings(tenant=tenant, globally_visible_kinds=["agent.reflected"])

    for settings in (RecallSettings.for_tenant(tenant), narrowed):
        for agent in Agent.objects.filter(tenant=tenant):
            assert visible_by_orm(agent, settings) == visible_by_sql(agent, settings), agent.name


def test_a_derived_event_records_the_kinds_behind_its_sources_too():
    thought = Event(kind="agent.thought", payload={"text": "t"})
    peer_reflection = Event(
        kind="agent.reflected", payload={"summary": "s", "source_kinds": ["agent.spoke"]}
    )
    spoken_with_a_lookalike_key = Event(
        kind="agent.spoke", payload={"text": "t", "source_kinds": ["ignored"]}
    )

    derived = event_derived_from([thought, peer_reflection, spoken_with_a_lookalike_key])

    assert derived == ["agent.reflected", "agent.spoke", "agent.thought"]


def test_reflections_are_written_under_a_kind_the_rule_treats_as_derived():
    from memory.recall.services import REFLECTED

    assert REFLECTED in DERIVED_KINDS
