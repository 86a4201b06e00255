"""Migration 0009 on an install that already holds names the new rule refuses: the oldest valid
name of each look-alike group stays, the others are renamed by ledger events, and the chain and
the agents projection still agree with the table.

The test migrates the ledger app back and forth as ``migrate`` does, as the owner of the tables
(the tests run as the service's role, which may not change the schema), so its rows are committed
and the schema is migrated forward again at the end.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ledger import services
from ledger.models import Agent, Event
from ledger.names import agent_name_key
from ledger.selectors import event_chain_verify

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("ledger", "0008_job_schedules")
AFTER = ("ledger", "0009_agent_name_key")


def _old_agents_model():
    return (
        MigrationExecutor(connection).loader.project_state(BEFORE).apps.get_model("ledger", "Agent")
    )


def _register(model, tenant, name):
    agent = model.objects.create(tenant_id=tenant.pk, name=name)
    services.event_append(
        tenant=tenant,
        kind="agent.registered",
        actor="system",
        payload={"agent_id": agent.pk, "name": name, "model": "", "primary_role": ""},
    )
    return agent.pk


def test_the_migration_renames_what_the_rule_refuses_through_the_ledger(tenant, other_tenant):
    call_command("migrate", *BEFORE, verbosity=0)
    try:
        old_agent = _old_agents_model()
        names = ["alpha", "ALPHA", "system", "human:bob", "alpha\u200b", "beta", "apple\u00a0pie"]
        ids = [_register(old_agent, tenant, name) for name in names]
        theirs = _register(old_agent, other_tenant, "ALPHA")
    finally:
        call_command("migrate", *AFTER, verbosity=0)
    try:
        _check_renamed(tenant, other_tenant, ids, theirs)
    finally:
        call_command("migrate", verbosity=0)


def _check_renamed(tenant, other_tenant, ids: list[int], theirs: int) -> None:
    renamed = dict(Agent.objects.filter(tenant=tenant).values_list("id", "name"))
    assert [renamed[agent_id] for agent_id in ids] == [
        "alpha",  # the oldest valid name of its group stays
        f"ALPHA-{ids[1]}",
        f"agent-{ids[2]}",
        f"agent-{ids[3]}",
        f"agent-{ids[4]}",
        "beta",
        "apple pie",  # its normal form was free
    ]
    assert Agent.objects.get(pk=theirs).name == "ALPHA"  # alone in its tenant: valid, unchanged
    for agent in Agent.objects.all():
        assert agent.name_key == agent_name_key(agent.name)
    updates = Event.objects.filter(tenant=tenant, kind="agent.updated").order_by("seq")
    assert [(e.actor, e.payload["agent_id"], e.payload["changes"]) for e in updates] == [
        ("system", agent_id, {"name": renamed[agent_id]})
        for agent_id in (ids[1], ids[2], ids[3], ids[4], ids[6])
    ]
    assert "migration 0009" in updates[0].payload["reason"]
    assert not Event.objects.filter(tenant=other_tenant, kind="agent.updated").exists()
    assert event_chain_verify(tenant=tenant).ok
    call_command("rebuild_projections", "--check", "--projection", "agents", verbosity=0)
