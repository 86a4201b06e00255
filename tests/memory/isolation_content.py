"""Content store endpoints in the isolation matrix (tests/ledger/test_isolation.py): the entries,
the objects of the victim tenant they target, and the rows that must not change."""

from __future__ import annotations

from typing import Any

from ledger.models import Agent, Role, Tenant
from memory.content.selectors import content_items_visible
from memory.content.services import (
    ItemDraft,
    action_result_record,
    content_item_store,
    content_snapshot_create,
)
from memory.models import ContentAttachment, ContentItem, ContentSnapshot
from tests.endpoints import Endpoint

ITEM = {"agent": "Creator1", "content": "a page", "run_id": "r"}
ACTION_RESULT = {"agent": "Creator1", "run_id": "r", "action_type": "web.fetch", "result": "x"}

CONTENT_ENDPOINTS: list[Endpoint] = [
    Endpoint("get", "/api/v1/content/items/", Role.AGENT),
    Endpoint("post", "/api/v1/content/items/", Role.AGENT, ITEM),
    Endpoint("get", "/api/v1/content/items/{id}/", Role.AGENT, target="content_item"),
    Endpoint(
        "post", "/api/v1/content/items/clear/", Role.AGENT, {"agent": "Creator1", "run_id": "r"}
    ),
    Endpoint("post", "/api/v1/content/action-results/", Role.AGENT, ACTION_RESULT),
    Endpoint("get", "/api/v1/content/runs/{id}/", Role.AGENT, target="content_run"),
    Endpoint(
        "post", "/api/v1/content/snapshots/", Role.AGENT, {"agent": "Creator1", "run_id": "r"}
    ),
    Endpoint("get", "/api/v1/content/snapshots/{id}/", Role.AGENT, target="content_snapshot"),
    Endpoint(
        "post",
        "/api/v1/content/snapshots/{id}/restore/",
        Role.AGENT,
        {"agent": "Creator1", "run_id": "r2"},
        target="content_snapshot",
    ),
]


def content_victims(*, tenant: Tenant, agent: Agent) -> dict[str, Any]:
    """Ids of the victim's content objects, by the ``target`` names the entries use."""
    item = content_item_store(
        agent=agent, actor="x", draft=ItemDraft(content="secret page", run_id="victim-run")
    )
    action_result_record(
        agent=agent,
        actor="x",
        run_id="victim-run",
        action_type="web.fetch",
        draft=ItemDraft(content="<html><title>Secret</title></html>"),
    )
    snapshot = content_snapshot_create(
        owner=agent,
        actor="x",
        items=content_items_visible(items=ContentItem.objects.filter(tenant=tenant), agent=agent),
        item_keys=[item.key],
        run_id=None,
        grantee=None,
    )
    return {"content_item": item.key, "content_run": "victim-run", "content_snapshot": snapshot.key}


def content_snapshot() -> list[Any]:
    return [
        *ContentItem.objects.order_by("id").values_list("id", "key", "content_hash", "cleared_at"),
        *ContentSnapshot.objects.order_by("id").values_list("id", "key"),
        *ContentAttachment.objects.order_by("id").values_list("id", "item_id", "agent_id"),
    ]
