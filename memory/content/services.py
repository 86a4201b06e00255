"""The content store, the fourth channel (SPEC 7): large results kept out of the conversation.

The writes of ``ContentItem``, ``ContentSnapshot`` and ``ContentAttachment`` (their reads and
renderings are in ``memory.content.selectors``). Every write appends a ``content.*`` ledger event
in the same transaction as its rows, with ids, hashes and sizes but never the content, so nothing
is half-stored and the audit log never swells with web pages.

Scopes: an item belongs to the agent that stored it, either to one of its runs (``run``) or to
the agent across runs (``agent``). Other agents read it only through a snapshot that holds it,
or after restoring such a snapshot into one of their own scopes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from config.api import Conflict
from ledger.models import Agent, Tenant
from ledger.projections import service_kinds_register
from ledger.services import EventDraft, events_append, tenant_write_lock
from memory.content.compaction import (
    Compaction,
    compact_with_plugins,
    content_compact,
)
from memory.content.selectors import snapshot_items
from memory.content.values import (
    ParsedContent,
    bad_request,
    content_parse,
    item_content,
    item_value,
    not_found,
)
from memory.context.tokens import token_count
from memory.models import (
    ContentAttachment,
    ContentFormat,
    ContentItem,
    ContentItemType,
    ContentScope,
    ContentSnapshot,
)

STORED = "content.stored"
CLEARED = "content.cleared"
SNAPSHOT_CREATED = "content.snapshot_created"
RESTORED = "content.restored"
CONTENT_EVENT_KINDS = (STORED, CLEARED, SNAPSHOT_CREATED, RESTORED)
# Reserved when this module is imported (the API imports it with the URLconf, before any client
# append is checked): a client must not forge an audit record of a store that never happened.
service_kinds_register(*CONTENT_EVENT_KINDS)

# 12 url-safe characters (72 random bits): short enough to quote in a conversation, and a
# collision within one tenant is too unlikely to handle other than by the unique constraint.
_ITEM_KEY_BYTES = 9
_SNAPSHOT_KEY_BYTES = 16
RETRIEVE_URL = "/api/v1/content/items/{key}/"


# --- Store -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemDraft:
    content: Any
    item_type: str = ContentItemType.CUSTOM
    scope: str = ""
    run_id: str = ""
    source: str = ""
    timestamp: datetime | None = None
    tags: Sequence[str] = ()
    related_to: Sequence[str] = ()


def _resolved_scope(draft: ItemDraft) -> str:
    scope = draft.scope or (ContentScope.RUN if draft.run_id else ContentScope.AGENT)
    if scope == ContentScope.RUN and not draft.run_id:
        raise bad_request("run_id_required", "An item scoped to a run needs a run_id.")
    return scope


def _check_related(tenant: Tenant, keys: Sequence[str]) -> None:
    known = set(
        ContentItem.objects.filter(tenant=tenant, key__in=keys).values_list("key", flat=True)
    )
    missing = [key for key in keys if key not in known]
    if missing:
        raise bad_request(
            "unknown_related_item",
            f"related_to names items that do not exist: {', '.join(missing)}.",
            missing=missing,
        )


def _new_item(
    *, agent: Agent, draft: ItemDraft, parsed: ParsedContent, key: str, now: datetime
) -> ContentItem:
    scope = _resolved_scope(draft)
    return ContentItem(
        tenant_id=agent.tenant_id,
        key=key,
        agent=agent,
        scope=scope,
        run_id=draft.run_id if scope == ContentScope.RUN else "",
        item_type=draft.item_type,
        format=parsed.format,
        body=parsed.body,
        content_hash=parsed.content_hash,
        size=parsed.size,
        source=draft.source,
        tags=list(dict.fromkeys(draft.tags)),
        related_to=list(dict.fromkeys(draft.related_to)),
        timestamp=draft.timestamp or now,
        created_at=now,
    )


def _stored_draft(item: ContentItem, actor: str) -> EventDraft:
    payload: dict[str, Any] = {
        "item_id": item.key,
        "agent_id": item.agent_id,
        "type": item.item_type,
        "format": item.format,
        "scope": item.scope,
        "sha256": item.content_hash,
        "size": item.size,
        "source": item.source,
        "tokens_full": item.tokens_full,
    }
    if item.action_type:
        payload.update(
            action_type=item.action_type,
            rendering=item.rendering,
            compactor=item.compactor,
            tokens_returned=item.tokens_returned,
        )
    return EventDraft(kind=STORED, actor=actor, payload=payload, run_id=item.run_id)


def full_rendering(item: ContentItem) -> str:
    """The content as it would sit in a conversation: text as is, JSON pretty-printed."""
    if item.format == ContentFormat.JSON:
        return json.dumps(item_value(item), ensure_ascii=False, indent=1)
    return item.body


def content_item_store(*, agent: Agent, actor: str, draft: ItemDraft) -> ContentItem:
    """Store one item and log it; returns the item, whose ``key`` is its id."""
    parsed = content_parse(draft.content)
    now = timezone.now()
    item = _new_item(
        agent=agent, draft=draft, parsed=parsed, key=secrets.token_urlsafe(_ITEM_KEY_BYTES), now=now
    )
    return _item_save(item, actor=actor)


def _item_save(item: ContentItem, *, actor: str) -> ContentItem:
    item.tokens_full = token_count(full_rendering(item))
    with transaction.atomic():
        tenant_write_lock(item.agent.tenant)
        _check_related(item.agent.tenant, item.related_to)
        item.save()
        events_append(tenant=item.agent.tenant, drafts=[_stored_draft(item, actor)])
    return item


@dataclass(frozen=True)
class ActionRecord:
    """How the action-result flow answered for an item, as an export recorded it."""

    action_type: str
    rendering: str
    compactor: str
    tokens_returned: int | None


def content_item_import(
    *, agent: Agent, actor: str, draft: ItemDraft, key: str, action: ActionRecord | None
) -> ContentItem:
    """Store an item as an export recorded it: under its own id (conversations quote it), with
    the action-result flow's answer when it had one. 409 ``content_item_exists`` when the id is
    taken here."""
    if not key or len(key) > ContentItem._meta.get_field("key").max_length:  # type: ignore[operator]
        raise bad_request("invalid_item_id", f"An item id is 1 to 16 characters, not {key!r}.")
    if ContentItem.objects.filter(tenant_id=agent.tenant_id, key=key).exists():
        raise Conflict(code="content_item_exists", message=f"Item {key} already exists here.")
    item = _new_item(
        agent=agent, draft=draft, parsed=content_parse(draft.content), key=key, now=timezone.now()
    )
    if action is not None:
        item.action_type = action.action_type
        item.rendering = action.rendering
        item.compactor = action.compactor
        item.tokens_returned = action.tokens_returned
    saved = _item_save(item, actor=actor)
    if action is not None:
        _savings_day_add(saved)
    return saved


# --- The action-result flow ----------------------------------------------------------------------


@dataclass(frozen=True)
class ActionResultOutcome:
    item: ContentItem
    first_time: bool
    conversation: str
    summary: dict[str, Any] | None


def _first_rendering(item: ContentItem) -> str:
    # One header line: the id, the size and where the content stays retrievable.
    url = RETRIEVE_URL.format(key=item.key)
    return (
        f"[content {item.key} · {item.size:,} bytes, in full · GET {url}]\n{full_rendering(item)}"
    )


def _compacted_rendering(item: ContentItem, compaction: Compaction) -> str:
    # The header says what was compacted and where the full content is; the transforms are named
    # once in the tool description the agent gets, not in every result.
    url = RETRIEVE_URL.format(key=item.key)
    rendering = compaction.rendering
    return (
        f"[content {item.key} · compacted {rendering.description} · full: GET {url}]\n"
        f"{rendering.body}"
    )


def _seen_before(agent: Agent, run_id: str, action_type: str) -> bool:
    # Cleared items count: clearing the store does not take the full result out of the
    # conversation that already holds it.
    return ContentItem.objects.filter(
        tenant_id=agent.tenant_id, agent=agent, run_id=run_id, action_type=action_type
    ).exists()


# One more result in its run's, agent's and day's sums (the token savings page reads those);
# ``memory.content.projection`` rebuilds the same rows from the items.
_SAVINGS_DAY_ADD_SQL = """
INSERT INTO memory_contentsavingsday AS d (tenant_id, day, run_id, agent_id, results,
    full_renderings, tokens_full, tokens_returned, last_result_at)
VALUES (%(tenant)s, (%(at)s::timestamptz AT TIME ZONE 'UTC')::date, %(run)s, %(agent)s, 1,
        %(full)s, %(tokens_full)s, %(tokens_returned)s, %(at)s)
ON CONFLICT (tenant_id, run_id, agent_id, day) DO UPDATE SET
    results = d.results + 1,
    full_renderings = d.full_renderings + excluded.full_renderings,
    tokens_full = d.tokens_full + excluded.tokens_full,
    tokens_returned = d.tokens_returned + excluded.tokens_returned,
    last_result_at = greatest(d.last_result_at, excluded.last_result_at)
"""


def _savings_day_add(item: ContentItem) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            _SAVINGS_DAY_ADD_SQL,
            {
                "tenant": item.tenant_id,
                "at": item.timestamp,
                "run": item.run_id,
                "agent": item.agent_id,
                "full": int(item.rendering == "full"),
                "tokens_full": item.tokens_full,
                "tokens_returned": item.tokens_returned,
            },
        )


def action_result_record(
    *,
    agent: Agent,
    actor: str,
    run_id: str,
    action_type: str,
    draft: ItemDraft,
    goal: str = "",
) -> ActionResultOutcome:
    """Store an action's result in the run and answer what goes into the conversation.

    "First time" is per agent, per run, per action type: each agent has its own conversation,
    and the first result of an action shows the agent what that action returns. Later results
    of the same action type in the run are compacted. Both renderings carry the item id and
    how to fetch the full content.
    """
    parsed = content_parse(draft.content)
    now = timezone.now()
    item = _new_item(
        agent=agent,
        draft=replace(draft, scope=ContentScope.RUN, run_id=run_id),
        parsed=parsed,
        key=secrets.token_urlsafe(_ITEM_KEY_BYTES),
        now=now,
    )
    item.action_type = action_type
    full = full_rendering(item)
    item.tokens_full = token_count(full)
    # The compaction (possibly an LLM call) is made before the transaction, so no lock is held
    # while an outside endpoint thinks; the decision itself is re-taken under the lock.
    compaction = (
        content_compact(item_content(item), goal=goal)
        if _seen_before(agent, run_id, action_type)
        else None
    )
    with transaction.atomic():
        # The tenant's write lock serialises two results of one action arriving together, so
        # exactly one of them is the first.
        tenant_write_lock(agent.tenant)
        _check_related(agent.tenant, item.related_to)
        first_time = not _seen_before(agent, run_id, action_type)
        if first_time:
            conversation, summary = _first_rendering(item), None
            item.rendering, item.compactor = "full", ""
        else:
            if compaction is None:  # another request became the first meanwhile
                compaction = compact_with_plugins(item_content(item))
            conversation = _compacted_rendering(item, compaction)
            summary = compaction.summary
            item.rendering, item.compactor = "compacted", compaction.compactor
        item.tokens_returned = token_count(conversation)
        item.save()
        _savings_day_add(item)
        events_append(tenant=agent.tenant, drafts=[_stored_draft(item, actor)])
    return ActionResultOutcome(
        item=item, first_time=first_time, conversation=conversation, summary=summary
    )


# --- Clear, snapshot, restore --------------------------------------------------------------------


def content_scope_clear(*, agent: Agent, actor: str, scope: str, run_id: str = "") -> int:
    """Clear one of the agent's scopes: its items lose their content (reads then answer 404) and
    items restored into the scope are detached (their owners keep them). Returns the count."""
    if scope == ContentScope.RUN and not run_id:
        raise bad_request("run_id_required", "Clearing a run scope needs its run_id.")
    target_run = run_id if scope == ContentScope.RUN else ""
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        # One UPDATE: the body goes, the row (hash, size, token counts) stays for the audit.
        cleared = ContentItem.objects.filter(
            tenant_id=agent.tenant_id,
            agent=agent,
            scope=scope,
            run_id=target_run,
            cleared_at__isnull=True,
        ).update(body="", cleared_at=timezone.now())
        detached, _ = ContentAttachment.objects.filter(
            tenant_id=agent.tenant_id, agent=agent, run_id=target_run
        ).delete()
        events_append(
            tenant=agent.tenant,
            drafts=[
                EventDraft(
                    kind=CLEARED,
                    actor=actor,
                    run_id=target_run,
                    payload={
                        "agent_id": agent.pk,
                        "scope": scope,
                        "items": cleared,
                        "detached": detached,
                    },
                )
            ],
        )
    return cleared


def content_snapshot_create(
    *,
    owner: Agent,
    actor: str,
    items: QuerySet[ContentItem],
    item_keys: Sequence[str],
    run_id: str | None,
    grantee: Agent | None,
    label: str = "",
) -> ContentSnapshot:
    """A read-only view of items the owner can read: the named ones, or all of a run's.

    ``items`` is what the owner may read; a key outside it is a 404, whether it belongs to
    another agent, another tenant or nobody.
    """
    with transaction.atomic():
        tenant_write_lock(owner.tenant)
        chosen = list(items.filter(key__in=item_keys)) if item_keys else []
        missing = sorted(set(item_keys) - {item.key for item in chosen})
        if missing:
            raise not_found(f"No content item {missing[0]} in your scope.")
        if run_id is not None:
            in_run = items.filter(agent=owner, scope=ContentScope.RUN, run_id=run_id)
            known = {item.pk for item in chosen}
            chosen.extend(item for item in in_run.defer("body") if item.pk not in known)
        if not chosen:
            raise bad_request(
                "empty_snapshot", "A snapshot needs at least one item (item_ids or run_id)."
            )
        snapshot = ContentSnapshot.objects.create(
            tenant=owner.tenant,
            key=secrets.token_urlsafe(_SNAPSHOT_KEY_BYTES),
            owner=owner,
            grantee=grantee,
            label=label,
            created_at=timezone.now(),
        )
        snapshot.items.set(chosen)
        events_append(
            tenant=owner.tenant,
            drafts=[
                EventDraft(
                    kind=SNAPSHOT_CREATED,
                    actor=actor,
                    run_id=run_id or "",
                    payload={
                        "snapshot_id": snapshot.key,
                        "owner_id": owner.pk,
                        "grantee_id": grantee.pk if grantee else None,
                        "item_ids": sorted(item.key for item in chosen),
                    },
                )
            ],
        )
    return snapshot


def content_snapshot_restore(
    *, snapshot: ContentSnapshot, agent: Agent, actor: str, run_id: str = ""
) -> int:
    """Attach the snapshot's items to one of the agent's scopes (a run, or the agent's own scope
    when ``run_id`` is empty), by reference. Restoring twice attaches once. Returns how many
    items are attached there now."""
    with transaction.atomic():
        tenant_write_lock(agent.tenant)
        now = timezone.now()
        items = list(snapshot_items(snapshot).only("pk", "agent_id", "run_id"))
        attachments = [
            ContentAttachment(
                tenant_id=agent.tenant_id,
                item=item,
                agent=agent,
                run_id=run_id,
                snapshot_key=snapshot.key,
                created_at=now,
            )
            for item in items
            if not (item.agent_id == agent.pk and item.run_id == run_id)
        ]
        ContentAttachment.objects.bulk_create(attachments, ignore_conflicts=True)
        events_append(
            tenant=agent.tenant,
            drafts=[
                EventDraft(
                    kind=RESTORED,
                    actor=actor,
                    run_id=run_id,
                    payload={
                        "snapshot_id": snapshot.key,
                        "agent_id": agent.pk,
                        "items": len(items),
                    },
                )
            ],
        )
    return len(items)
