"""Reads from the ledger app."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import Q

from ledger.chain import event_hash
from ledger.models import Agent, ApiKey, Event, Membership, RecallSettings, Tenant

_VERIFY_BATCH = 10_000


def api_key_by_secret(*, raw_key: str) -> ApiKey | None:
    """The active key with this secret, or None. Looks up by hash: the secret is never stored."""
    from ledger.services import api_key_hash

    return (
        ApiKey.objects.select_related("tenant", "agent")
        .filter(key_hash=api_key_hash(raw_key), revoked_at__isnull=True)
        .first()
    )


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    events_checked: int
    first_broken_seq: int | None = None
    reason: str = ""


def event_chain_verify(*, tenant: Tenant) -> ChainReport:
    """Walk the tenant's chain in seq order and report the first link that does not hold.

    Streams keyset-paginated batches of plain tuples (no model instances), so memory stays flat
    however long the chain.
    """
    expected_seq = 1
    prev_hash = Event.GENESIS_HASH
    checked = 0
    after_seq = 0
    while True:
        batch = _chain_batch(tenant.pk, after_seq)
        if not batch:
            return ChainReport(ok=True, events_checked=checked)
        after_seq = batch[-1][0]
        for (
            seq,
            run_id,
            round_id,
            turn,
            actor,
            kind,
            payload,
            created_at,
            prev,
            digest,
        ) in batch:
            if seq != expected_seq:
                return ChainReport(
                    False, checked, expected_seq, f"event #{expected_seq} is missing"
                )
            if prev != prev_hash:
                return ChainReport(
                    False, checked, seq, "prev_hash does not match the previous event's hash"
                )
            recomputed = event_hash(
                tenant_id=tenant.pk,
                seq=seq,
                run_id=run_id,
                round_id=round_id,
                turn=turn,
                actor=actor,
                kind=kind,
                payload=json.loads(payload),
                created_at=created_at,
                prev_hash=prev,
            )
            if recomputed != digest:
                return ChainReport(False, checked, seq, "contents do not match the stored hash")
            prev_hash = digest
            expected_seq += 1
            checked += 1


def _chain_batch(tenant_id: int, after_seq: int) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, run_id, round_id, turn, actor, kind, payload::text, created_at,"
            " prev_hash, hash FROM ledger_event WHERE tenant_id = %s AND seq > %s"
            " ORDER BY seq LIMIT %s",
            [tenant_id, after_seq, _VERIFY_BATCH],
        )
        return list(cursor.fetchall())


def membership_for_user(*, user: AbstractBaseUser | AnonymousUser) -> Membership | None:
    """The person's membership; with several tenants, the oldest (tenant switching comes later)."""
    return (
        Membership.objects.select_related("tenant")
        .filter(user_id=user.pk)
        .order_by("created_at", "id")
        .first()
    )


@dataclass(frozen=True)
class TenantOverview:
    tenant: Tenant
    agent_count: int
    event_count: int
    last_event_at: datetime | None
    agents: list[Agent]


def tenant_overview(*, tenant: Tenant, agent_limit: int = 20) -> TenantOverview:
    """What the home page shows: how many agents and events the tenant has, and its first agents.

    The event count is the last event's ``seq``: a tenant's chain is numbered 1, 2, 3… without
    gaps (``event_chain_verify`` proves it), so one index lookup replaces a COUNT over the log.
    """
    last_event = Event.objects.for_tenant(tenant).order_by("-seq").only("seq", "created_at").first()
    agents = Agent.objects.for_tenant(tenant)
    return TenantOverview(
        tenant=tenant,
        agent_count=agents.count(),
        event_count=last_event.seq if last_event else 0,
        last_event_at=last_event.created_at if last_event else None,
        agents=list(agents.order_by("name", "id")[:agent_limit]),
    )


def event_visible_to(*, agent: Agent, settings: RecallSettings | None = None) -> Q:
    """Events an agent may see: its own, plus the tenant's globally visible kinds.

    Pass the tenant's settings when the caller already has them, to save a query.
    """
    visible = (settings or RecallSettings.for_tenant(agent.tenant)).globally_visible_kinds
    return Q(actor=agent.name) | Q(kind__in=visible)
