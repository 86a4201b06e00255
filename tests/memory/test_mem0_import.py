"""The way in from mem0: its get_all answer (tests/fixtures/mem0_get_all.json, in mem0's
published v1.1 format) becomes episodic memories, once."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Agent, Event
from memory.models import Memory

pytestmark = pytest.mark.django_db

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "mem0_get_all.json"
IMPORTED = 5  # of the fixture's 6 records, one has expired


def _import(tenant, path=FIXTURE, *extra):
    out = StringIO()
    call_command("import_mem0", str(path), "--tenant", tenant.slug, *extra, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_it_imports_every_live_record_into_the_named_agent(tenant, dissent_embedder):
    summary = _import(tenant, FIXTURE, "--agent", "Assistant")

    assert summary.pop("seconds") > 0
    assert summary == {
        "tenant": tenant.slug,
        "records": 6,
        "imported": IMPORTED,
        "already_imported": 0,
        "expired": 1,
        "agents_created": ["Assistant"],
    }
    memories = {m.metadata["mem0"]["id"][-2:]: m for m in Memory.objects.filter(tenant=tenant)}
    assert set(memories) == {"01", "02", "03", "04", "06"}
    assert {m.agent.name for m in memories.values()} == {"Assistant"}
    assert all(m.embedding is not None for m in memories.values())
    # created_at is when it happened, in UTC; a naive time is read as UTC.
    assert memories["01"].occurred_at == datetime(2024, 7, 20, 8, 30, 36, 275141, tzinfo=UTC)
    assert memories["06"].occurred_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    # run_id is the session, the role is kept, metadata kept beside what mem0 said of it.
    slack = memories["02"]
    assert (slack.session_id, slack.role) == ("run-42", "assistant")
    assert slack.metadata["source"] == "slack"
    assert slack.metadata["mem0"]["agent_id"] == "support-bot"
    assert slack.metadata["mem0"]["updated_at"] == "2024-07-22T10:15:00+00:00"
    assert slack.memory_type == "approval"  # inferred, as for any memory stored without one
    # Unicode survives; null metadata and null agent_id are no trouble.
    assert memories["03"].content == "Lives in Zürich, loves 寿司 🍣 and says “grüezi”"
    assert memories["03"].metadata == {
        "lang": "de-CH",
        "mem0": {
            "id": "0b1e7b3c-5d0a-4a53-9c65-3f3a7c1d2e03",
            "hash": "a3c5e7f9b1d3f5a7c9e1b3d5f7a9c1e3",
            "user_id": "alex",
            "created_at": "2024-08-01T18:45:12.000001+02:00",
            "updated_at": "2024-08-01T18:45:12.000001+02:00",
        },
    }
    # A distilled fact, not a turn: it keeps a fact's 90 days from the import, not 7.
    assert memories["01"].memory_type == "fact"
    assert memories["01"].expires_at - memories["01"].created_at == timedelta(days=90)
    assert memories["04"].tags == ["travel", "personal_details"]
    assert memories["04"].metadata["mem0"]["app_id"] == "web"
    assert "mem0" not in memories["06"].metadata["mem0"]


def test_running_it_again_imports_nothing_twice(tenant, dissent_embedder):
    _import(tenant, FIXTURE, "--agent", "Assistant")
    events = Event.objects.filter(tenant=tenant).count()

    again = _import(tenant, FIXTURE, "--agent", "Assistant")

    assert again["imported"] == 0
    assert again["already_imported"] == IMPORTED
    assert Memory.objects.filter(tenant=tenant).count() == IMPORTED
    assert Event.objects.filter(tenant=tenant).count() == events


def test_a_dump_with_new_records_adds_only_those(tenant, dissent_embedder, tmp_path):
    _import(tenant, FIXTURE, "--agent", "Assistant")
    document = json.loads(FIXTURE.read_text())
    document["results"].append(
        {"id": "new-1", "memory": "Switched to oat milk", "metadata": None, "user_id": "alex"}
    )
    # The same id twice in one file is one memory.
    document["results"].append(dict(document["results"][-1]))
    (tmp_path / "newer.json").write_text(json.dumps(document))

    summary = _import(tenant, tmp_path / "newer.json", "--agent", "Assistant")

    assert summary["imported"] == 1
    assert summary["already_imported"] == IMPORTED + 1
    assert Memory.objects.filter(tenant=tenant).count() == IMPORTED + 1


def test_the_older_plain_list_format_imports_the_same(tenant, dissent_embedder, tmp_path):
    (tmp_path / "v1.json").write_text(json.dumps(json.loads(FIXTURE.read_text())["results"]))

    summary = _import(tenant, tmp_path / "v1.json", "--agent", "Assistant")

    assert summary["imported"] == IMPORTED


def test_without_an_agent_each_records_agent_id_names_it_and_one_without_is_refused(
    tenant, dissent_embedder, tmp_path
):
    document = json.loads(FIXTURE.read_text())

    with pytest.raises(CommandError, match="record 0: has no agent_id"):
        _import(tenant)

    assert not Memory.objects.filter(tenant=tenant).exists()
    assert not Agent.objects.filter(tenant=tenant).exists()
    with_agent = [r for r in document["results"] if r.get("agent_id")]
    (tmp_path / "bots.json").write_text(json.dumps({"results": with_agent}))
    summary = _import(tenant, tmp_path / "bots.json")
    assert summary["agents_created"] == ["support-bot"]
    assert Memory.objects.get(tenant=tenant).agent.name == "support-bot"


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"id": "x", "memory": "  "}, "record 1: memory \\(the text\\) is missing or empty"),
        ({"memory": "text"}, "record 1: has no id"),
        ({"id": "x", "memory": "t", "metadata": [1]}, "record 1: metadata must be an object"),
        ({"id": "x", "memory": "t", "created_at": "yesterday"}, "record 1: created_at is not"),
        ({"id": "x", "memory": "t", "categories": "travel"}, "record 1: categories must be"),
        ("just text", "record 1: must be an object"),
    ],
)
def test_a_bad_record_is_named_and_nothing_is_written(tenant, tmp_path, record, problem):
    good = {"id": "ok", "memory": "fine", "agent_id": "bot"}
    (tmp_path / "bad.json").write_text(json.dumps({"results": [good, record]}))

    with pytest.raises(CommandError, match=problem):
        _import(tenant, tmp_path / "bad.json", "--agent", "Assistant")

    assert not Memory.objects.filter(tenant=tenant).exists()


def test_a_file_that_is_not_mem0s_is_refused(tenant, tmp_path):
    (tmp_path / "other.json").write_text('{"memories": []}')

    with pytest.raises(CommandError, match="Not a mem0 get_all answer"):
        _import(tenant, tmp_path / "other.json", "--agent", "Assistant")


def test_a_rebuild_after_the_import_changes_no_memory(tenant, dissent_embedder):
    _import(tenant, FIXTURE, "--agent", "Assistant")
    out = StringIO()

    call_command("rebuild_projections", "--check", "--tenant", tenant.slug, "--json", stdout=out)

    results = json.loads(out.getvalue())["results"]
    assert {r["projection"]: r["equal"] for r in results}["memories"] is True


class _Terminal(StringIO):
    def isatty(self):
        return True


def test_it_draws_a_bar_on_a_terminal_and_says_what_it_did(tenant, dissent_embedder, monkeypatch):
    stderr = _Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    out = StringIO()

    call_command("import_mem0", str(FIXTURE), "--tenant", tenant.slug, "--agent", "A1", stdout=out)

    assert "mem0" in stderr.getvalue()
    assert "/6 [" in stderr.getvalue()  # the total: the records of the file
    assert out.getvalue() == (
        "6 mem0 records: 5 imported, 0 already here, 1 expired; new agents: A1\n"
    )
