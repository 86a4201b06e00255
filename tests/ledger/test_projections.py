from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger import services
from ledger.models import Agent, Event
from ledger.projections import projection_rebuild, registered_projections
from tests.tampering import tamper

pytestmark = pytest.mark.django_db


def agents_projection():
    return next(p for p in registered_projections() if p.name == "agents")


def agent_rows(tenant):
    return list(
        Agent.objects.filter(tenant=tenant)
        .order_by("id")
        .values_list("id", "name", "model", "primary_role")
    )


def test_rebuilding_agents_from_the_ledger_changes_nothing(tenant, make_agent):
    first = make_agent(tenant, name="A", model="m1")
    second = make_agent(tenant, name="B")
    services.agent_update(agent=first, actor="system", changes={"name": "C"})
    services.agent_update(agent=second, actor="system", changes={"name": "A", "model": "m2"})
    make_agent(tenant, name="D")
    services.agent_delete(agent=Agent.objects.get(tenant=tenant, name="D"), actor="system")
    before = agent_rows(tenant)

    unchanged = projection_rebuild(projection=agents_projection(), tenant=tenant)

    assert unchanged
    assert agent_rows(tenant) == before


def test_rebuilding_repairs_rows_that_drifted_from_the_ledger(tenant, make_agent):
    agent = make_agent(tenant, name="Creator1", model="m1")
    make_agent(tenant, name="Reviewer1")
    expected = agent_rows(tenant)
    Agent.objects.filter(pk=agent.pk).update(model="tampered")
    Agent.objects.filter(name="Reviewer1").delete()
    Agent.objects.create(tenant=tenant, name="Ghost")

    unchanged = projection_rebuild(projection=agents_projection(), tenant=tenant)

    assert not unchanged
    assert agent_rows(tenant) == expected


def test_the_check_command_reports_drift_and_writes_nothing(tenant, make_agent):
    agent = make_agent(tenant, name="Creator1", model="m1")
    Agent.objects.filter(pk=agent.pk).update(model="tampered")
    out = StringIO()

    with pytest.raises(CommandError, match="acme/agents"):
        call_command("rebuild_projections", "--check", stdout=out)

    assert "DIFFERED" in out.getvalue()
    assert Agent.objects.get(pk=agent.pk).model == "tampered"


def test_the_rebuild_command_repairs(tenant, make_agent):
    agent = make_agent(tenant, name="Creator1", model="m1")
    Agent.objects.filter(pk=agent.pk).update(model="tampered")

    call_command("rebuild_projections", stdout=StringIO())

    assert Agent.objects.get(pk=agent.pk).model == "m1"


@pytest.mark.django_db(transaction=True)
def test_verify_command_exits_non_zero_on_a_broken_chain(tenant):
    event = services.event_append(tenant=tenant, kind="world.observed", actor="system")
    out = StringIO()
    call_command("verify_ledger", stdout=out)
    assert "acme: ok" in out.getvalue()

    tamper("UPDATE ledger_event SET actor = 'x' WHERE id = %s", [event.pk])

    with pytest.raises(CommandError) as raised:
        call_command("verify_ledger", stdout=out)
    assert raised.value.returncode == 1
    assert f"BROKEN at seq {event.seq}" in out.getvalue()
    assert Event.objects.filter(tenant=tenant).count() == 2
