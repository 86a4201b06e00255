from __future__ import annotations

import os
import re
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from config.supervisor import DataFolderLock
from ledger.demo import DEMO_API_KEY_NAME, admin_user_ensure, demo_data_seed, demo_tenant_ensure
from ledger.management.commands.up import Command as UpCommand
from ledger.models import Agent, ApiKey, Event, Membership, Role, Tenant

pytestmark = pytest.mark.django_db


def _run(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def _printed_key(output: str) -> str:
    match = re.search(r"^(amk_\S+)$", output, re.MULTILINE)
    assert match, output
    return match.group(1)


def _agents_status(raw_key: str) -> int:
    client = APIClient()
    return client.get("/api/v1/agents/", HTTP_AUTHORIZATION=f"Bearer {raw_key}").status_code


# --- create_tenant / create_api_key ------------------------------------------------------------


def test_it_creates_a_tenant():
    output = _run("create_tenant", "beta", name="Beta Labs")

    tenant = Tenant.objects.get(slug="beta")
    assert tenant.name == "Beta Labs"
    assert "beta" in output
    assert Event.objects.filter(tenant=tenant, kind="tenant.created", actor="system").count() == 1


def test_it_refuses_a_duplicate_slug(tenant):
    with pytest.raises(CommandError, match="already exists"):
        _run("create_tenant", tenant.slug, name="Again")

    assert Tenant.objects.filter(slug=tenant.slug).count() == 1


def test_it_refuses_an_invalid_slug():
    with pytest.raises(CommandError, match="not a valid slug"):
        _run("create_tenant", "no spaces", name="Bad")


def test_it_creates_an_api_key_that_authenticates(tenant):
    output = _run("create_api_key", tenant=tenant.slug, name="ci", role="admin")

    raw_key = _printed_key(output)
    assert "will not be shown again" in output
    assert _agents_status(raw_key) == 200
    api_key = ApiKey.objects.get(tenant=tenant, name="ci")
    assert api_key.role == Role.ADMIN
    assert api_key.agent is None
    assert raw_key not in {api_key.key_hash, api_key.prefix}


def test_it_creates_an_agent_scoped_key(tenant, make_agent):
    agent = make_agent(tenant, name="Reviewer1")

    output = _run("create_api_key", tenant=tenant.slug, name="r1", role="agent", agent="Reviewer1")

    assert ApiKey.objects.get(tenant=tenant, name="r1").agent == agent
    assert "Reviewer1" in output
    assert _agents_status(_printed_key(output)) == 200


def test_it_refuses_an_unknown_tenant():
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        _run("create_api_key", tenant="nope", name="x", role="agent")


def test_it_refuses_an_unknown_agent(tenant):
    with pytest.raises(CommandError, match="no agent named 'Ghost'"):
        _run("create_api_key", tenant=tenant.slug, name="x", role="agent", agent="Ghost")

    assert not ApiKey.objects.filter(tenant=tenant).exists()


def test_it_does_not_see_agents_of_other_tenants(tenant, other_tenant, make_agent):
    make_agent(other_tenant, name="Outsider")

    with pytest.raises(CommandError, match="no agent named 'Outsider'"):
        _run("create_api_key", tenant=tenant.slug, name="x", role="agent", agent="Outsider")


# --- Demo tenant, admin login and demo data -----------------------------------------------------


def _demo_counts(tenant: Tenant) -> tuple[int, int, int]:
    return (
        Agent.objects.filter(tenant=tenant).count(),
        Event.objects.filter(tenant=tenant).count(),
        ApiKey.objects.filter(tenant=tenant).count(),
    )


def test_demo_seeding_is_idempotent():
    tenant, created = demo_tenant_ensure()
    assert created
    assert demo_tenant_ensure() == (tenant, False)

    first = demo_data_seed(tenant=tenant)
    counts_after_first = _demo_counts(tenant)
    second = demo_data_seed(tenant=tenant)

    assert _demo_counts(tenant) == counts_after_first
    assert sorted(first.agents_created) == ["Creator1", "Curator1", "Reviewer1", "Reviewer2"]
    assert first.runs_seeded == ["run_20250214_153000", "run_20250215_091000"]
    assert first.api_key is not None
    assert second.agents_created == []
    assert second.runs_seeded == []
    assert second.events_appended == 0
    assert second.api_key is None
    assert ApiKey.objects.filter(tenant=tenant, name=DEMO_API_KEY_NAME).count() == 1
    assert _agents_status(first.api_key) == 200


def test_demo_runs_have_rounds_and_increasing_turns():
    tenant, _ = demo_tenant_ensure()
    demo_data_seed(tenant=tenant)

    # The run's scripted events; the demo's action results in the run are content-store events,
    # which carry the run but no turn.
    run = list(
        Event.objects.filter(tenant=tenant, run_id="run_20250214_153000")
        .exclude(kind="content.stored")
        .order_by("seq")
    )

    assert run[0].kind == "run.started"
    assert run[0].payload["goal"]
    turns = [event.turn for event in run]
    assert turns == list(range(len(turns)))
    assert {event.round_id for event in run[1:]} == {
        "run_20250214_153000/round_1",
        "run_20250214_153000/round_2",
    }
    kinds = {event.kind for event in run}
    assert {"agent.spoke", "judge.verdict", "verdict.final", "workflow.step_completed"} <= kinds


def test_demo_seeding_skips_a_run_already_recorded():
    tenant, _ = demo_tenant_ensure()
    demo_data_seed(tenant=tenant)
    recorded = Event.objects.filter(tenant=tenant, run_id="run_20250215_091000").count()

    again = demo_data_seed(tenant=tenant)

    assert again.runs_seeded == []
    assert Event.objects.filter(tenant=tenant, run_id="run_20250215_091000").count() == recorded


def test_admin_ensure_shows_a_generated_password_only_once(monkeypatch):
    monkeypatch.delenv("AGENT_MEMORY_ADMIN_PASSWORD", raising=False)
    monkeypatch.setenv("AGENT_MEMORY_ADMIN_USERNAME", "boss")
    first_out, second_out = StringIO(), StringIO()

    first_notes = UpCommand(stdout=first_out).ensure_identity(demo=False)
    second_notes = UpCommand(stdout=second_out).ensure_identity(demo=False)

    user = get_user_model().objects.get(username="boss")
    password = re.search(r"Admin password for 'boss': (\S+)", "\n".join(first_notes))
    assert password, first_notes
    assert user.is_superuser
    assert user.check_password(password.group(1))
    assert password.group(1) not in first_out.getvalue() + second_out.getvalue()
    assert second_notes == []
    assert "admin user 'boss' exists" in second_out.getvalue()
    demo = Tenant.objects.get(slug="demo")
    assert Membership.objects.get(tenant=demo, user=user).role == Role.ADMIN
    assert Event.objects.filter(tenant=demo, kind="membership.granted").count() == 1


def test_admin_ensure_uses_the_configured_password(monkeypatch):
    monkeypatch.setenv("AGENT_MEMORY_ADMIN_PASSWORD", "correct horse battery staple")

    notes = UpCommand(stdout=StringIO()).ensure_identity(demo=False)

    assert notes == []
    assert (
        get_user_model()
        .objects.get(username="admin")
        .check_password("correct horse battery staple")
    )


def test_admin_ensure_never_changes_an_existing_password():
    tenant, _ = demo_tenant_ensure()
    admin_user_ensure(tenant=tenant, username="admin", password="first password 1")

    again = admin_user_ensure(tenant=tenant, username="admin", password="second password 2")

    assert not again.created
    assert again.generated_password is None
    assert get_user_model().objects.get(username="admin").check_password("first password 1")


def test_up_demo_prints_the_demo_key_once(monkeypatch):
    monkeypatch.setenv("AGENT_MEMORY_ADMIN_PASSWORD", "correct horse battery staple")

    first = UpCommand(stdout=StringIO()).ensure_identity(demo=True)
    second = UpCommand(stdout=StringIO()).ensure_identity(demo=True)

    key = re.search(r"(amk_\S+)", "\n".join(first))
    assert key, first
    assert _agents_status(key.group(1)) == 200
    assert second == []


# --- services ------------------------------------------------------------------------------------


def test_services_status_reports_sockets():
    output = _run("services", "status")

    assert str(settings.EMBEDDED.redis_socket) in output
    assert ".s.PGSQL.5432" in output
    if not os.environ.get("DATABASE_URL"):
        assert "PostgreSQL:   answering" in output


def test_services_stop_refuses_while_up_holds_the_lock():
    lock = DataFolderLock(settings.DATA_DIR)
    assert lock.acquire()
    try:
        with pytest.raises(CommandError, match="already running"):
            _run("services", "stop")
    finally:
        lock.release()

    if not os.environ.get("DATABASE_URL"):
        assert "PostgreSQL:   answering" in _run("services", "status")
