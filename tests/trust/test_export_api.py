"""GET /api/v1/export/: the JSON Lines document streamed to an admin key, the same bytes the
export_jsonl command writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import cast

import pytest
from django.core.management import call_command
from django.http import StreamingHttpResponse

from ledger.models import Role
from memory.episodic.services import MemoryDraft, memories_store

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_agents(tenant, make_agent, dissent_embedder):
    creator = make_agent(tenant, name="Creator1")
    reviewer = make_agent(tenant, name="Reviewer2")
    memories_store(agent=creator, drafts=[MemoryDraft(content="private note ☃")], actor="o")
    memories_store(agent=reviewer, drafts=[MemoryDraft(content="reviewed")], actor="o")
    return creator, reviewer


def _body(response) -> bytes:
    assert isinstance(response, StreamingHttpResponse)
    assert not response.is_async  # the WSGI test client streams a plain iterator
    return b"".join(cast("Iterator[bytes]", response.streaming_content))


def test_an_admin_streams_the_commands_document(tenant, two_agents, api_as):
    command = StringIO()
    call_command("export_jsonl", "--tenant", tenant.slug, stdout=command)

    response = api_as(tenant, role=Role.ADMIN).get("/api/v1/export/")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert "export.jsonl" in response["Content-Disposition"]
    assert _body(response).decode() == command.getvalue()


def test_one_agents_export_holds_only_its_rows(tenant, two_agents, api_as):
    creator, _ = two_agents

    response = api_as(tenant, role=Role.ADMIN).get(f"/api/v1/export/?agent={creator.pk}")

    lines = [json.loads(line) for line in _body(response).decode().splitlines()]
    assert [line["type"] for line in lines] == ["header", "agent", "memory"]
    assert lines[2]["content"] == "private note ☃"


def test_another_tenants_agent_is_not_found(tenant, other_tenant, two_agents, api_as):
    creator, _ = two_agents

    response = api_as(other_tenant, role=Role.ADMIN).get(f"/api/v1/export/?agent={creator.pk}")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("role", [Role.AGENT, Role.REVIEWER])
def test_only_an_admin_may_export(tenant, two_agents, api_as, role):
    response = api_as(tenant, role=role).get("/api/v1/export/")

    assert response.status_code == 403
    assert b"private note" not in response.content


def test_a_client_may_ask_for_ndjson(tenant, two_agents, api_as):
    response = api_as(tenant, role=Role.ADMIN).get(
        "/api/v1/export/", HTTP_ACCEPT="application/x-ndjson"
    )

    assert response.status_code == 200
    assert _body(response).startswith(b'{"format":"agent-memory-export"')
