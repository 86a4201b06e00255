"""The full export as JSON Lines: export, import into an empty tenant, export again, same bytes;
a rebuild after the import; refusals that leave nothing behind; the commands' summaries."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger.models import Agent, Event
from memory.consolidation.services import memories_supersede
from memory.content.services import ItemDraft, action_result_record, content_item_store
from memory.embeddings.services import event_embeddings_build
from memory.episodic.lifecycle import memories_decay
from memory.episodic.services import (
    MemoryDraft,
    memories_mark_retrieved,
    memories_store,
    memory_update,
)
from memory.knowledge.services import DocumentFields, knowledge_document_create
from memory.models import KnowledgeDocument, Memory
from trust.governance.services import CriterionDraft, rubric_version_create
from trust.interchange.lines import ExportScope, export_lines
from trust.models import Dissent, Override
from trust.rounds.overrides import override_log, override_revert
from trust.rounds.services import dissent_log, dissent_set_impact, rounds_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def full_tenant(tenant, make_agent, dissent_embedder):
    """A tenant with something of every kind the export carries, written by the services."""
    now = timezone.now()
    rubric_version_create(
        tenant=tenant,
        criteria=[CriterionDraft(name="cost", description="What it costs")],
        actor="human:alice",
        note="first",
    )
    rubric_version_create(
        tenant=tenant,
        criteria=[CriterionDraft(name="cost"), CriterionDraft(name="security", description="é")],
        actor="human:alice",
    )
    knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(title="Deploys", body="# Deploys\n\nRoll back with care.\n"),
        actor="system",
        publish=True,
    )
    knowledge_document_create(
        tenant=tenant,
        fields=DocumentFields(
            title="Reviewer", body="Be direct.", kind="skill", applies_to=("Reviewer2",)
        ),
        actor="system",
        publish=True,
    )
    knowledge_document_create(
        tenant=tenant, fields=DocumentFields(title="Draft", body="not yet"), actor="system"
    )
    creator = make_agent(tenant, name="Creator1", model="gpt-x", primary_role="creator")
    reviewer = make_agent(tenant, name="Reviewer2", primary_role="reviewer")
    round_ = rounds_post(
        tenant=tenant, round_id="run/round_1", participants=["Creator1"], actor="o"
    )
    dissent = dissent_log(
        agent=creator,
        text="The plan ignores the cost of retries entirely.",
        round_id=round_.round_id,
        context={"task": "ADR"},
        actor="o",
    )
    dissent_set_impact(dissent=dissent, impact=True, feedback_incorporated=True, actor="o")
    override = override_log(
        agent=creator,
        agent_output="use redis",
        human_decision="use pg",
        decided_by="alice",
        round_id=round_.round_id,
        actor="o",
    )
    override_revert(override=override, reverted_by="alice", note="pg was wrong", actor="o")
    memories = memories_store(
        agent=creator,
        drafts=[
            MemoryDraft(
                content="We approved the $4,000 budget.",
                session_id="s1",
                metadata={"speaker": "Ana"},
                tags=["budget"],
            ),
            MemoryDraft(content="ok thanks", session_id="s1", role="assistant"),
            MemoryDraft(
                content="Remember: the staging DB is read-only ☃",
                importance=1.0,
                occurred_at=now - timedelta(days=3),
            ),
        ],
        actor="o",
    )
    memories_store(agent=reviewer, drafts=[MemoryDraft(content="Reviewed PR 12")], actor="o")
    _supersession_chain(creator, now)
    memory_update(memory=memories[1], actor="o", changes={"tags": ["small-talk"]})
    memories_mark_retrieved(tenant=tenant, memory_ids=[memories[0].pk], at=now)
    Memory.objects.filter(pk=memories[1].pk).update(importance=0.01)
    memories_decay(now=now)
    first = content_item_store(
        agent=creator,
        actor="o",
        draft=ItemDraft(content={"rows": [1, 2.5, "ü"]}, run_id="r1", source="sql", tags=["t"]),
    )
    content_item_store(
        agent=reviewer,
        actor="o",
        draft=ItemDraft(content="page text", item_type="web_content", related_to=[first.key]),
    )
    action_result_record(
        agent=creator,
        actor="o",
        run_id="r1",
        action_type="search",
        draft=ItemDraft(content="result one\nresult two", run_id="r1"),
    )
    return tenant


def _supersession_chain(agent, now):
    """EUR -> GBP -> USD by ``supersedes`` at store; a newer memory superseded after the fact
    by an older one (its successor comes before it); one that ended without a successor."""
    month_ago = now - timedelta(days=30)
    eur = memories_store(
        agent=agent,
        drafts=[MemoryDraft(content="I prefer invoices in EUR.", occurred_at=month_ago)],
        actor="o",
    )[0]
    gbp = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content="Now I prefer GBP for invoices.",
                occurred_at=now - timedelta(days=20),
                valid_from=now - timedelta(days=21),
                supersedes=(eur.pk,),
            )
        ],
        actor="o",
    )[0]
    memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content="Invoices in USD from now on.",
                occurred_at=now - timedelta(days=10),
                supersedes=(gbp.pk,),
            )
        ],
        actor="o",
    )
    earlier, later = memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(content="The office is in Leeds.", occurred_at=now - timedelta(days=5)),
            MemoryDraft(content="The office is in York.", occurred_at=now - timedelta(days=4)),
        ],
        actor="o",
    )
    memories_supersede(memory=earlier, ids=[later.pk], actor="human:alice")
    memories_store(
        agent=agent,
        drafts=[
            MemoryDraft(
                content="The freeze lasts a week.",
                occurred_at=now - timedelta(days=9),
                valid_until=now - timedelta(days=2),
            )
        ],
        actor="o",
    )


def _export(tenant, path: Path, *extra: str) -> bytes:
    call_command(
        "export_jsonl", "--tenant", tenant.slug, "--output", str(path), *extra, stdout=StringIO()
    )
    return path.read_bytes()


def test_export_import_export_gives_the_same_bytes(full_tenant, other_tenant, tmp_path):
    first = _export(full_tenant, tmp_path / "a.jsonl")

    call_command(
        "import_jsonl", str(tmp_path / "a.jsonl"), "--tenant", other_tenant.slug, stdout=StringIO()
    )
    again = _export(other_tenant, tmp_path / "b.jsonl")

    assert again == first
    lines = [json.loads(line) for line in first.decode().splitlines()]
    kinds = [line["type"] for line in lines]
    assert (
        kinds
        == ["header"]
        + ["rubric_version"] * 2
        + ["knowledge_document"] * 3
        + ["agent"] * 2
        + ["memory"] * 10
        + ["content_item"] * 3
    )
    # Nothing names the installation: neither tenant nor row ids appear.
    assert full_tenant.slug not in first.decode()
    memory = next(line for line in lines if line["type"] == "memory")
    assert memory["retrieval_count"] == 1
    assert memory["last_retrieved_at"]
    archived = [line for line in lines if line["type"] == "memory" and line["archived_at"]]
    assert [line["content"] for line in archived] == ["ok thanks"]
    # Its history: the events of its store and its update, which the import keeps.
    assert [(e["kind"], e["actor"]) for e in archived[0]["history"]] == [
        ("memory.stored", "o"),
        ("memory.updated", "o"),
    ]
    # The chain keeps its intervals, each successor named by its position among the memories.
    memories = [line for line in lines if line["type"] == "memory"]
    by_content = {line["content"]: line for line in memories}
    position = {line["content"]: i for i, line in enumerate(memories)}
    eur, gbp = by_content["I prefer invoices in EUR."], by_content["Now I prefer GBP for invoices."]
    assert eur["superseded_by"] == position["Now I prefer GBP for invoices."]
    assert eur["valid_until"] == gbp["valid_from"] != gbp["occurred_at"]
    assert gbp["superseded_by"] == position["Invoices in USD from now on."]
    assert by_content["Invoices in USD from now on."]["valid_until"] is None
    assert (
        by_content["The office is in York."]["superseded_by"] == position["The office is in Leeds."]
    )
    freeze = by_content["The freeze lasts a week."]
    assert freeze["valid_until"]
    assert freeze["superseded_by"] is None
    imported = {m.content: m for m in Memory.objects.filter(tenant=other_tenant).order_by("id")}
    assert imported["I prefer invoices in EUR."].superseded_by == (
        imported["Now I prefer GBP for invoices."].pk
    )
    assert Event.objects.filter(tenant=other_tenant, kind="memory.superseded").count() == 3
    assert Memory.objects.filter(tenant=other_tenant).count() == 10
    assert Memory.objects.filter(tenant=other_tenant, embedding__isnull=True).count() == 0
    assert Dissent.objects.filter(tenant=other_tenant).count() == 1
    assert Override.objects.filter(tenant=other_tenant, reverted_by="alice").count() == 1


def test_a_rebuild_after_an_import_changes_nothing(full_tenant, other_tenant, tmp_path):
    first = _export(full_tenant, tmp_path / "a.jsonl")
    call_command(
        "import_jsonl", str(tmp_path / "a.jsonl"), "--tenant", other_tenant.slug, stdout=StringIO()
    )
    # What the worker does after commit: index the new events for recall.
    event_embeddings_build(
        event_ids=list(Event.objects.filter(tenant=other_tenant).values_list("pk", flat=True))
    )

    checked = StringIO()
    call_command(
        "rebuild_projections", "--check", "--tenant", other_tenant.slug, "--json", stdout=checked
    )
    assert json.loads(checked.getvalue())["differing"] == []
    # The projections' rows gone, the ledger brings them back as they were.
    Memory.objects.filter(tenant=other_tenant).delete()
    KnowledgeDocument.objects.filter(tenant=other_tenant).delete()
    call_command("rebuild_projections", "--tenant", other_tenant.slug, stdout=StringIO())

    assert _export(other_tenant, tmp_path / "c.jsonl") == first


def test_an_import_into_a_tenant_with_data_is_refused(
    full_tenant, other_tenant, tmp_path, make_agent
):
    _export(full_tenant, tmp_path / "a.jsonl")
    make_agent(other_tenant, name="Someone")
    events = Event.objects.filter(tenant=other_tenant).count()

    with pytest.raises(CommandError, match="already holds data"):
        call_command("import_jsonl", str(tmp_path / "a.jsonl"), "--tenant", other_tenant.slug)

    assert Event.objects.filter(tenant=other_tenant).count() == events


def test_merge_adds_to_a_tenant_with_data_and_keeps_its_rubric(
    full_tenant, other_tenant, tmp_path, make_agent
):
    _export(full_tenant, tmp_path / "a.jsonl")
    make_agent(other_tenant, name="Someone")
    rubric_version_create(
        tenant=other_tenant, criteria=[CriterionDraft(name="speed")], actor="system"
    )
    out = StringIO()

    call_command(
        "import_jsonl",
        str(tmp_path / "a.jsonl"),
        "--tenant",
        other_tenant.slug,
        "--merge",
        "--json",
        stdout=out,
    )

    summary = json.loads(out.getvalue())
    assert summary["skipped"] == {"rubric_version": 2}
    assert summary["imported"]["memory"] == 10
    assert Agent.objects.filter(tenant=other_tenant).count() == 3


def test_a_malformed_line_names_its_number_and_leaves_nothing(full_tenant, other_tenant, tmp_path):
    lines = _export(full_tenant, tmp_path / "a.jsonl").decode().splitlines()
    bad = json.loads(lines[10])
    assert bad["type"] == "memory"
    bad["importance"] = 7
    lines[10] = json.dumps(bad)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    before = Event.objects.filter(tenant=other_tenant).count()

    with pytest.raises(CommandError, match=r"line 11: .*importance"):
        call_command("import_jsonl", str(tmp_path / "bad.jsonl"), "--tenant", other_tenant.slug)

    assert Event.objects.filter(tenant=other_tenant).count() == before
    assert not Agent.objects.filter(tenant=other_tenant).exists()
    assert not KnowledgeDocument.objects.filter(tenant=other_tenant).exists()


@pytest.mark.parametrize(
    ("successor", "problem"),
    [(99, "names no memory line"), ("self", "names its own line"), (-1, "position")],
)
def test_a_bad_successor_names_its_line_and_leaves_nothing(
    full_tenant, other_tenant, tmp_path, successor, problem
):
    lines = _export(full_tenant, tmp_path / "a.jsonl").decode().splitlines()
    number, line = next(
        (i, json.loads(text))
        for i, text in enumerate(lines)
        if json.loads(text).get("content") == "I prefer invoices in EUR."
    )
    own = sum(1 for text in lines[:number] if json.loads(text)["type"] == "memory")
    line["superseded_by"] = own if successor == "self" else successor
    lines[number] = json.dumps(line)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")

    with pytest.raises(CommandError, match=rf"line {number + 1}: .*({problem})"):
        call_command("import_jsonl", str(tmp_path / "bad.jsonl"), "--tenant", other_tenant.slug)

    assert not Memory.objects.filter(tenant=other_tenant).exists()
    assert not Event.objects.filter(tenant=other_tenant, kind="memory.stored").exists()


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "line 2: is not JSON"),
        ('{"type": "memory", "agent": "Nobody"}', "line 2: agent: names no agent"),
        ('{"type": "spaceship"}', "line 2: unknown type 'spaceship'"),
        ("[1, 2]", "line 2: \\(document\\): must be an object"),
    ],
)
def test_each_kind_of_bad_line_is_named(other_tenant, tmp_path, line, problem):
    header = '{"format":"agent-memory-export","scope":"tenant","type":"header","version":1}'
    (tmp_path / "bad.jsonl").write_text(f"{header}\n{line}\n")

    with pytest.raises(CommandError, match=problem):
        call_command("import_jsonl", str(tmp_path / "bad.jsonl"), "--tenant", other_tenant.slug)


def test_the_first_line_must_be_a_header_of_this_format(other_tenant, tmp_path):
    (tmp_path / "x.jsonl").write_text('{"type":"header","format":"mem0","version":1}\n')

    with pytest.raises(CommandError, match="line 1: format must be 'agent-memory-export'"):
        call_command("import_jsonl", str(tmp_path / "x.jsonl"), "--tenant", other_tenant.slug)


def test_an_agent_export_holds_only_that_agents_rows(full_tenant):
    creator = Agent.objects.get(tenant=full_tenant, name="Creator1")

    lines = [
        json.loads(text) for _, text in export_lines(ExportScope(tenant=full_tenant, agent=creator))
    ]

    assert lines[0]["scope"] == "agent"
    assert {line["type"] for line in lines} == {"header", "agent", "memory", "content_item"}
    assert {line.get("agent", line.get("agent_name")) for line in lines[1:]} == {"Creator1"}
    # Positions count this document's memories only (the reviewer's are not among them).
    memories = [line for line in lines if line["type"] == "memory"]
    eur = next(line for line in memories if line["content"] == "I prefer invoices in EUR.")
    assert memories[eur["superseded_by"]]["content"] == "Now I prefer GBP for invoices."


def test_export_json_summary_counts_each_type(full_tenant, tmp_path):
    out = StringIO()

    call_command(
        "export_jsonl",
        "--tenant",
        full_tenant.slug,
        "--output",
        str(tmp_path / "a.jsonl"),
        "--json",
        stdout=out,
    )

    summary = json.loads(out.getvalue())
    assert summary["counts"] == {
        "header": 1,
        "rubric_version": 2,
        "knowledge_document": 3,
        "agent": 2,
        "memory": 10,
        "content_item": 3,
    }
    assert summary["lines"] == 21
    assert summary["bytes"] == (tmp_path / "a.jsonl").stat().st_size


def test_export_to_stdout_writes_the_document_only(full_tenant):
    out = StringIO()

    call_command("export_jsonl", "--tenant", full_tenant.slug, "--agent", "Reviewer2", stdout=out)

    lines = out.getvalue().splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        "header",
        "agent",
        "memory",
        "content_item",
    ]


class _Terminal(StringIO):
    def isatty(self):
        return True


def test_the_commands_draw_a_bar_on_a_terminal_and_keep_stdout_whole(
    full_tenant, other_tenant, tmp_path, monkeypatch
):
    stderr = _Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    exported, imported = StringIO(), StringIO()

    call_command(
        "export_jsonl",
        "--tenant",
        full_tenant.slug,
        "--output",
        str(tmp_path / "a.jsonl"),
        stdout=exported,
    )
    call_command(
        "import_jsonl", str(tmp_path / "a.jsonl"), "--tenant", other_tenant.slug, stdout=imported
    )

    drawn = stderr.getvalue()
    assert "export" in drawn
    assert "import" in drawn
    assert "/21 [" in drawn  # the total: the lines of the document
    assert exported.getvalue().startswith(f"Exported 21 lines to {tmp_path / 'a.jsonl'}")
    assert imported.getvalue() == (
        f"Imported 21 lines into {other_tenant.slug}: 2 agent, 3 content_item, "
        "3 knowledge_document, 10 memory, 2 rubric_version\n"
    )


def test_import_json_summary_counts_what_it_wrote(full_tenant, other_tenant, tmp_path):
    _export(full_tenant, tmp_path / "a.jsonl")
    out = StringIO()

    call_command(
        "import_jsonl",
        str(tmp_path / "a.jsonl"),
        "--tenant",
        other_tenant.slug,
        "--json",
        stdout=out,
    )

    summary = json.loads(out.getvalue())
    assert summary.pop("seconds") > 0
    assert summary == {
        "tenant": other_tenant.slug,
        "lines": 21,
        "imported": {
            "agent": 2,
            "content_item": 3,
            "knowledge_document": 3,
            "memory": 10,
            "rubric_version": 2,
        },
        "skipped": {},
    }


@pytest.mark.parametrize("command", ["export_jsonl", "import_jsonl", "import_mem0"])
def test_an_unknown_tenant_is_named_with_how_to_make_it(command, db, tmp_path):
    (tmp_path / "f.json").write_text("{}")
    args = [] if command == "export_jsonl" else [str(tmp_path / "f.json")]

    with pytest.raises(CommandError, match=r"No tenant 'nope'\. Create it with: .*create_tenant"):
        call_command(command, *args, "--tenant", "nope")
