"""Deleting an agent is one ledger-complete step: everything of the agent goes, its memories'
sealed content can no longer be opened, and a rebuild from the ledger gives the same tables."""

from __future__ import annotations

import importlib
from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, models
from django.test import Client

from ledger import services
from ledger.models import Agent, Event, Role
from ledger.projections import registered_projections
from memory.content.services import (
    ItemDraft,
    action_result_record,
    content_item_store,
    content_snapshot_create,
    content_snapshot_restore,
)
from memory.embeddings.services import event_embeddings_build
from memory.episodic.sealing import unseal
from memory.episodic.services import MemoryDraft, memories_store, memory_delete, memory_update
from memory.knowledge.services import DocumentFields, knowledge_document_create
from memory.models import ContentItem, KnowledgeDocument, Memory, MemoryKey
from trust.governance.services import CriterionDraft, rubric_proposal_open, rubric_version_create
from trust.models import Dissent, GamingFlag, Override, RubricProposal
from trust.rounds.overrides import override_log, override_revert
from trust.rounds.services import dissent_log, dissent_set_impact, round_finalize, rounds_post

pytestmark = pytest.mark.django_db

SECRET = "alpha's secret: the vault code is 4417"
CONTENT = "alpha's page: the quarterly numbers nobody else may read"

repair = importlib.import_module("memory.migrations.0013_shred_keys_of_deleted_agents")


@pytest.fixture
def alpha(tenant, make_agent, make_key, dissent_embedder, settings) -> Agent:
    """An agent with a row in every table that holds an agent's things, beside another agent
    (beta) and the tenant's knowledge base that stay."""
    settings.GAMING_MIN_TRUST = 0.0  # a flag for alpha's narrow citations
    settings.RUBRIC_PROPOSAL_MIN_TRUST = 0.5  # beta, at 0.6, may propose from alpha's override
    alpha = make_agent(tenant, name="alpha")
    beta = make_agent(tenant, name="beta")
    make_key(tenant, role=Role.AGENT, agent=alpha)
    _, changed, dropped = memories_store(
        agent=alpha,
        drafts=[MemoryDraft(content=SECRET), MemoryDraft(content="v1"), MemoryDraft(content="x")],
        actor="alpha",
    )
    memory_update(memory=changed, actor="alpha", changes={"content": "v2 of a note"})
    memory_delete(memory=dropped, actor="alpha")
    memories_store(agent=beta, drafts=[MemoryDraft(content="beta remembers")], actor="beta")
    knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(
            title="Review", body="Review carefully.", kind="skill", applies_to=("alpha",)
        ),
        actor="admin",
        publish=True,
    )
    item = content_item_store(agent=alpha, actor="alpha", draft=ItemDraft(content=CONTENT))
    action_result_record(
        agent=alpha,
        actor="alpha",
        run_id="run-1",
        action_type="search",
        draft=ItemDraft(content="results", run_id="run-1"),
    )
    given = content_snapshot_create(
        owner=alpha,
        actor="alpha",
        items=ContentItem.objects.filter(agent=alpha),
        item_keys=[item.key],
        run_id=None,
        grantee=beta,
    )
    content_snapshot_restore(snapshot=given, agent=beta, actor="beta", run_id="run-2")
    betas = content_item_store(agent=beta, actor="beta", draft=ItemDraft(content="for alpha"))
    content_snapshot_create(
        owner=beta,
        actor="beta",
        items=ContentItem.objects.filter(agent=beta),
        item_keys=[betas.key],
        run_id=None,
        grantee=alpha,
    )
    rubric_version_create(tenant=tenant, criteria=[CriterionDraft("Accuracy")], actor="admin")
    round_ = rounds_post(tenant=tenant, round_id="r1", participants=["alpha", "beta"], actor="o")
    for n in range(10):
        dissent = dissent_log(
            agent=alpha,
            text=f"point {n} is wrong",
            round_id="r1",
            rubric_citations=["Accuracy"],
            actor="alpha",
        )
    dissent_set_impact(dissent=dissent, impact=True, actor="o")
    dissent_log(agent=beta, text="beta disagrees", round_id="r1", actor="beta")
    override = override_log(
        agent=alpha,
        agent_output="a",
        human_decision="b",
        decided_by="beta",
        round_id="r1",
        actor="o",
    )
    rubric_proposal_open(
        override=override,
        action="add",
        criterion="Speed",
        description="Be quick.",
        rationale="It was slow.",
        actor="beta",
    )
    second = override_log(
        agent=alpha, agent_output="c", human_decision="d", decided_by="human:bob", actor="o"
    )
    override_revert(override=second, reverted_by="human:bob", actor="o")
    override_log(
        agent=beta, agent_output="e", human_decision="f", decided_by="human:bob", actor="o"
    )
    round_finalize(round=round_, final_output="b", actor="o")
    assert GamingFlag.objects.filter(agent=alpha).exists()
    assert Memory.objects.filter(agent=alpha).count() == 2
    return alpha


def rows_pointing_at(agent_id: int) -> dict[str, int]:
    """Rows of every model with a foreign key to Agent that name this agent."""
    found = {}
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, models.ForeignKey) and field.related_model is Agent:
                count = model._default_manager.filter(**{field.attname: agent_id}).count()
                if count:
                    key = f"{model._meta.label}.{field.name}"
                    found[key] = count
    return found


def sealed_payloads(agent_id: int) -> list[tuple[int, str]]:
    return [
        (e.payload["memory_id"], e.payload.get("sealed") or e.payload["changes"]["sealed"])
        for e in Event.objects.filter(kind__in=["memory.stored", "memory.updated"])
        if e.payload["agent_id"] == agent_id
        and ("sealed" in e.payload or "sealed" in e.payload.get("changes", {}))
    ]


def ledger_mentions(text: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM ledger_event WHERE payload::text LIKE %s", [f"%{text}%"]
        )
        return int(cursor.fetchone()[0])


def snapshots(tenant) -> dict[str, Any]:
    return {p.name: p.snapshot(tenant=tenant) for p in registered_projections()}


def check_and_rebuild(tenant) -> None:
    """rebuild_projections --check passes, and a real rebuild leaves every table as it was."""
    # The semantic index is filled by a worker after commit; build it as the worker would.
    event_embeddings_build(event_ids=list(Event.objects.values_list("pk", flat=True)))
    before = snapshots(tenant)
    out = StringIO()

    call_command("rebuild_projections", "--check", stdout=out)
    call_command("rebuild_projections", stdout=out)

    assert "DIFFERED" not in out.getvalue()
    assert snapshots(tenant) == before


def test_deleting_an_agent_removes_all_of_it_and_a_rebuild_agrees(tenant, alpha, api_as):
    alpha_id = alpha.pk
    memories = set(Memory.objects.filter(agent=alpha).values_list("pk", flat=True))
    sealed = sealed_payloads(alpha_id)
    keys = dict(MemoryKey.objects.filter(memory_id__in=memories).values_list("memory_id", "key"))
    assert unseal(key=keys[sealed[0][0]], sealed=sealed[0][1])["content"] == SECRET

    answer = api_as(tenant).delete(f"/api/v1/agents/{alpha_id}/")

    assert answer.status_code == 204
    assert rows_pointing_at(alpha_id) == {}
    # The ledger holds the content sealed only, and no key to open it is left anywhere.
    assert not MemoryKey.objects.filter(memory_id__in=[m for m, _ in sealed]).exists()
    assert (ledger_mentions("vault code"), ledger_mentions("quarterly numbers")) == (0, 0)
    removed = Event.objects.get(kind="agent.deleted").payload["removed"]
    assert (removed["memory.Memory"], removed["memory.MemoryKey"]) == (2, 2)
    assert (removed["memory.ContentItem"], removed["memory.ContentSnapshot"]) == (2, 2)
    assert (removed["trust.Dissent"], removed["trust.Override"]) == (10, 2)
    assert (removed["trust.GamingFlag"], removed["trust.RoundParticipant"]) == (1, 1)
    assert removed["ledger.ApiKey"] == 1
    # What is the tenant's, or beta's, stays.
    assert KnowledgeDocument.objects.filter(tenant=tenant).count() == 1
    assert Memory.objects.filter(agent__name="beta").count() == 1
    assert RubricProposal.objects.get().override_id is None
    assert Dissent.objects.filter(agent__name="beta").count() == 1
    assert Override.objects.filter(agent__name="beta").count() == 1
    check_and_rebuild(tenant)


def test_the_repair_shreds_what_an_agent_deleted_the_old_way_left(tenant, alpha):
    alpha_id = alpha.pk
    sealed = sealed_payloads(alpha_id)
    # What agent_delete did before issue 18: the event, then the bare cascade, keys left behind.
    services.event_append(
        tenant=tenant,
        kind="agent.deleted",
        actor="system",
        payload={"agent_id": alpha_id, "name": "alpha"},
    )
    Agent.objects.filter(pk=alpha_id).delete()
    keys = dict(MemoryKey.objects.values_list("memory_id", "key"))
    opened = [unseal(key=keys[m], sealed=s)["content"] for m, s in sealed if m in keys]
    assert SECRET in opened  # still readable from the ledger
    # The replay already treats the old event as removing everything of the agent before it.
    call_command("rebuild_projections", "--check", "--projection", "memories", stdout=StringIO())

    with connection.cursor() as cursor:
        cursor.execute(repair.SHRED_KEYS_OF_DELETED_AGENTS)

    assert not MemoryKey.objects.filter(memory_id__in=[m for m, _ in sealed]).exists()
    assert MemoryKey.objects.filter(tenant=tenant).count() == 1  # beta's
    check_and_rebuild(tenant)


def test_the_repair_leaves_the_keys_of_living_agents_and_of_drifted_rows(tenant, alpha):
    # A memory row lost without any event is drift the rebuild restores: its key must stay.
    Memory.objects.filter(agent=alpha, content=SECRET).delete()
    keys = MemoryKey.objects.count()

    with connection.cursor() as cursor:
        cursor.execute(repair.SHRED_KEYS_OF_DELETED_AGENTS)

    assert MemoryKey.objects.count() == keys
    call_command("rebuild_projections", "--projection", "memories", stdout=StringIO())
    assert Memory.objects.filter(agent=alpha, content=SECRET).exists()


@pytest.mark.parametrize("how", ["delete view", "bulk action"])
def test_the_admin_deletes_an_agent_through_the_service(tenant, alpha, how):
    admin = get_user_model().objects.create_superuser(username="root", password="pw-1234-long")
    client = Client()
    client.force_login(admin)

    if how == "delete view":
        answer = client.post(f"/admin/ledger/agent/{alpha.pk}/delete/", {"post": "yes"})
    else:
        answer = client.post(
            "/admin/ledger/agent/",
            {"action": "delete_selected", "_selected_action": [alpha.pk], "post": "yes"},
        )

    assert answer.status_code == 302
    deleted = Event.objects.get(kind="agent.deleted")
    assert (deleted.actor, deleted.payload["removed"]["memory.MemoryKey"]) == ("human:root", 2)
    assert rows_pointing_at(alpha.pk) == {}
    check_and_rebuild(tenant)
