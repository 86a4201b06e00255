"""Reads from the ledger app."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import Q

from config.sql import row_named
from ledger.anchors import Checkpoint, CheckpointLog, checkpoints_read
from ledger.chain import event_hash
from ledger.models import (
    WORKFLOW_STEP_KIND,
    Agent,
    ApiKey,
    ChainVerification,
    Event,
    Membership,
    RecallSettings,
    Tenant,
)

_VERIFY_BATCH = 10_000


def _selected(model: type[Any], alias: str) -> str:
    return ", ".join(
        f'{alias}."{field.column}" AS "{alias}_{field.attname}"'
        for field in model._meta.concrete_fields
    )


def _from_row(model: type[Any], alias: str, row: Any) -> Any:
    names = [field.attname for field in model._meta.concrete_fields]
    return model.from_db("default", names, [getattr(row, f"{alias}_{name}") for name in names])


AGENT_NAMED_SQL = f"""
SELECT {_selected(Agent, "a")}, {_selected(Tenant, "t")}, {_selected(RecallSettings, "s")}
FROM ledger_agent AS a
JOIN ledger_tenant AS t ON t.id = a.tenant_id
LEFT JOIN ledger_recallsettings AS s ON s.tenant_id = a.tenant_id
WHERE a.tenant_id = %s AND a.name = %s
"""  # noqa: S608 (column names from the models' fields, no input)


def agent_named(*, tenant_id: int, name: str) -> Agent | None:
    """The tenant's agent of this name, with its tenant and the tenant's recall settings (what a
    search reads), or None.

    The same rows as ``Agent.objects.select_related("tenant__recall_settings")``, by one
    statement written out: compiling that query cost a search more CPU than running it.
    """
    with connection.cursor() as cursor:
        cursor.execute(AGENT_NAMED_SQL, [tenant_id, name])
        row = row_named(cursor)
    if row is None:
        return None
    agent: Agent = _from_row(Agent, "a", row)
    tenant: Tenant = _from_row(Tenant, "t", row)
    recall = _from_row(RecallSettings, "s", row) if row.s_id is not None else None
    Tenant.recall_settings.related.set_cached_value(tenant, recall)
    if recall is not None:
        RecallSettings.tenant.field.set_cached_value(recall, tenant)
    Agent.tenant.field.set_cached_value(agent, tenant)
    return agent


def api_key_by_hash(key_hash: str) -> ApiKey | None:
    """The active key whose secret hashes to ``key_hash``, with its tenant and agent."""
    return (
        ApiKey.objects.select_related("tenant", "agent__tenant__recall_settings")
        .filter(key_hash=key_hash, revoked_at__isnull=True)
        .first()
    )


@dataclass(frozen=True)
class ChainReport:
    """What a walk of a tenant's chain found. ``code`` is stable (clients may branch on it):
    "" when ok, else ``event_missing``, ``link_broken``, ``hash_mismatch`` (the database's own
    evidence), ``checkpoint_mismatch``, ``ledger_truncated`` or ``checkpoint_invalid`` (the
    evidence of the checkpoints kept outside it, ledger/anchors.py)."""

    ok: bool
    events_checked: int
    first_broken_seq: int | None = None
    reason: str = ""
    code: str = ""
    # The last event walked (the head, unless the walk stopped early or at until_seq).
    head_seq: int = 0
    head_hash: str = ""
    # The newest checkpoint the chain was held against, if any.
    checkpoint_seq: int | None = None
    checkpoint_at: datetime | None = None


def _broken(checked: int, seq: int, code: str, reason: str, **more: Any) -> ChainReport:
    return ChainReport(False, checked, seq, reason, code, **more)


def event_chain_verify(
    *, tenant: Tenant, until_seq: int | None = None, since: CheckpointLog | None = None
) -> ChainReport:
    """Walk the tenant's chain in seq order and report the first link that does not hold.

    Every checkpoint of the tenant (ledger/anchors.py) is held against the event at its seq, and
    a chain that ends below the newest one was truncated. ``until_seq`` stops the walk there (a
    receipt's event). ``since`` (the tenant's checkpoint log) starts the walk at its newest
    checkpoint instead of at event 1, after checking that event still carries the signed hash:
    what the frequent checkpoint job verifies.

    Streams keyset-paginated batches of plain tuples (no model instances), so memory stays flat
    however long the chain.
    """
    log = since if since is not None else checkpoints_read(tenant_id=tenant.pk)
    if log.problem:
        return _broken(0, 0, "checkpoint_invalid", f"a checkpoint cannot be trusted: {log.problem}")
    checkpoints = list(log.checkpoints)
    anchored: dict[str, Any] = {
        "checkpoint_seq": checkpoints[-1].seq if checkpoints else None,
        "checkpoint_at": checkpoints[-1].signed_at if checkpoints else None,
    }
    start = checkpoints[-1] if since is not None and checkpoints else None
    expected_seq, prev_hash = 1, Event.GENESIS_HASH
    if start is not None:
        stored = event_hash_at(tenant=tenant, seq=start.seq)
        if stored is None or stored != start.hash:
            return _anchor_broken(tenant, start, stored, matched=None, checked=0, anchored=anchored)
        expected_seq, prev_hash = start.seq + 1, start.hash
        checkpoints = []
    pending = iter(checkpoints)
    next_checkpoint = next(pending, None)
    matched: Checkpoint | None = None
    checked = 0
    head_seq, head_hash = expected_seq - 1, prev_hash
    after_seq = expected_seq - 1
    while until_seq is None or after_seq < until_seq:
        batch = _chain_batch(tenant.pk, after_seq, until_seq)
        if not batch:
            break
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
                return _broken(
                    checked,
                    expected_seq,
                    "event_missing",
                    f"event #{expected_seq} is missing",
                    **anchored,
                )
            if prev != prev_hash:
                return _broken(
                    checked,
                    seq,
                    "link_broken",
                    "prev_hash does not match the previous event's hash",
                    **anchored,
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
                return _broken(
                    checked,
                    seq,
                    "hash_mismatch",
                    "contents do not match the stored hash",
                    **anchored,
                )
            while next_checkpoint is not None and next_checkpoint.seq == seq:
                if next_checkpoint.hash != digest:
                    return _anchor_broken(
                        tenant, next_checkpoint, digest, matched, checked, anchored
                    )
                matched, next_checkpoint = next_checkpoint, next(pending, None)
            prev_hash = digest
            head_seq, head_hash = seq, digest
            expected_seq += 1
            checked += 1
    if until_seq is None and next_checkpoint is not None:
        # The walk ended below a checkpointed seq: the chain lost its newest events.
        return _anchor_broken(tenant, checkpoints[-1], None, matched, checked, anchored)
    return ChainReport(True, checked, head_seq=head_seq, head_hash=head_hash, **anchored)


def event_hash_at(*, tenant: Tenant, seq: int) -> str | None:
    """The stored hash of the tenant's event ``seq``; None when there is none."""
    return Event.objects.filter(tenant=tenant, seq=seq).values_list("hash", flat=True).first()


def event_head_seq(*, tenant: Tenant) -> int:
    """The seq of the tenant's newest event; 0 for an empty chain."""
    head = Event.objects.filter(tenant=tenant).order_by("-seq").values_list("seq", flat=True)
    return head.first() or 0


def _anchor_broken(
    tenant: Tenant,
    checkpoint: Checkpoint,
    stored: str | None,
    matched: Checkpoint | None,
    checked: int,
    anchored: dict[str, Any],
) -> ChainReport:
    """The report for an event that disagrees with a checkpoint (absent: ``stored`` None)."""
    signed = f"the checkpoint signed {checkpoint.signed_at:%Y-%m-%d %H:%M:%S} UTC"
    if stored is None:
        last = event_head_seq(tenant=tenant)
        if last < checkpoint.seq:
            removed = (
                f"event #{checkpoint.seq} was"
                if last + 1 == checkpoint.seq
                else f"events #{last + 1}-#{checkpoint.seq} were"
            )
            return _broken(
                checked,
                last + 1,
                "ledger_truncated",
                f"the chain ends at event #{last}, but {signed} recorded event "
                f"#{checkpoint.seq}: {removed} removed",
                **anchored,
            )
        return _broken(
            checked,
            checkpoint.seq,
            "event_missing",
            f"event #{checkpoint.seq}, which {signed} recorded, is missing",
            **anchored,
        )
    since = f"after event #{matched.seq} (the last checkpoint that holds)" if matched else ""
    return _broken(
        checked,
        checkpoint.seq,
        "checkpoint_mismatch",
        f"event #{checkpoint.seq} does not carry the hash {signed} recorded: history up to it "
        f"was rewritten{' ' + since if since else ''} and its hashes recomputed",
        **anchored,
    )


def _chain_batch(tenant_id: int, after_seq: int, until_seq: int | None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, run_id, round_id, turn, actor, kind, payload::text, created_at,"
            " prev_hash, hash FROM ledger_event WHERE tenant_id = %s AND seq > %s AND seq <= %s"
            " ORDER BY seq LIMIT %s",
            [tenant_id, after_seq, until_seq if until_seq is not None else 2**62, _VERIFY_BATCH],
        )
        return list(cursor.fetchall())


def memberships_for_user(*, user: AbstractBaseUser | AnonymousUser) -> list[Membership]:
    """Every seat of the person, oldest first, with its tenant: one query (a person holds few)."""
    return list(
        Membership.objects.select_related("tenant")
        .filter(user_id=user.pk)
        .order_by("created_at", "id")
    )


def membership_chosen(seats: list[Membership], *, tenant_id: object) -> Membership | None:
    """The seat in the tenant the person chose (``tenant_id`` from the session), or their oldest
    seat when the choice is missing or no longer one of their seats (removed since)."""
    for seat in seats:
        if seat.tenant_id == tenant_id:
            return seat
    return seats[0] if seats else None


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


# --- What an agent may see of the ledger (SPEC 3.1) ---------------------------------------------
#
# An agent sees its own events and the others' public ones. An event is public when its kind is
# one of the tenant's globally visible kinds and, for a kind made from other events (a
# reflection), every kind it was made from is too: a compaction of private thoughts is as
# private as the thoughts. Such an event records those kinds in its payload (DERIVED_FROM_KEY,
# see ``event_derived_from``), so the rule is read from the event itself under today's settings.
# A reflection written before it recorded them names only the seq range it covers (COVERS_KEY):
# its sources can no longer be told (the visible kinds of that day are unknown, and a covered
# peer reflection may itself have carried private text), so it stays private to its actor.
#
# The rule is spelled twice, side by side: ``event_visible_to`` for the ORM and
# ``event_visible_sql`` for raw statements (recall, memory search); tests/ledger/test_visibility.py
# holds the two to the same answers. Every reader of events on an agent's behalf uses one of them.

DERIVED_KINDS = ("agent.reflected",)
# Kinds every agent of the tenant sees whatever its visible kinds: completed workflow steps are
# the organisation's record of work done (design note 001 searches them tenant-wide).
TENANT_WIDE_KINDS = (WORKFLOW_STEP_KIND,)
DERIVED_FROM_KEY = "source_kinds"
# The seq range every reflection of the service records; beside no DERIVED_FROM_KEY, an old one.
COVERS_KEY = "covers"


def public_kinds(settings: RecallSettings) -> list[str]:
    """The kinds of the others' events an agent sees: the tenant's choice and the tenant-wide."""
    return sorted({*settings.globally_visible_kinds, *TENANT_WIDE_KINDS})


def event_visible_to(*, agent: Agent, settings: RecallSettings | None = None) -> Q:
    """Events an agent may see: its own, plus the others' public events (see above).

    Pass the tenant's settings when the caller already has them, to save a query.
    """
    visible = public_kinds(settings or RecallSettings.for_tenant(agent.tenant))
    sources_public = Q(**{f"payload__{DERIVED_FROM_KEY}__contained_by": visible}) | (
        ~Q(payload__has_key=DERIVED_FROM_KEY) & ~Q(payload__has_key=COVERS_KEY)
    )
    public = Q(kind__in=visible) & (~Q(kind__in=DERIVED_KINDS) | sources_public)
    return Q(actor=agent.name) | public


def event_visible_sql(alias: str) -> str:
    """``event_visible_to`` as a SQL condition on the ledger_event row ``alias``, for raw
    statements. Its parameters are named; ``event_visible_params`` gives them."""
    e = alias
    return f"""({e}.actor = %(viewer)s OR (
        {e}.kind = ANY(%(visible_kinds)s::text[])
        AND ({e}.kind <> ALL(%(derived_kinds)s::text[]) OR CASE
            WHEN {e}.payload ? '{DERIVED_FROM_KEY}'
            THEN {e}.payload -> '{DERIVED_FROM_KEY}' <@ to_jsonb(%(visible_kinds)s::text[])
            ELSE NOT {e}.payload ? '{COVERS_KEY}' END)))"""


def event_visible_params(*, agent: Agent, settings: RecallSettings) -> dict[str, Any]:
    return {
        "viewer": agent.name,
        "visible_kinds": public_kinds(settings),
        "derived_kinds": list(DERIVED_KINDS),
    }


def event_derived_from(events: Iterable[Event]) -> list[str]:
    """What an event made from these ones records under DERIVED_FROM_KEY: their kinds, and the
    kinds that derived ones among them were made from in turn (a reflection that compacts a
    peer's reflection is public only while everything behind that one is)."""
    kinds: set[str] = set()
    for event in events:
        kinds.add(event.kind)
        if event.kind not in DERIVED_KINDS or not isinstance(event.payload, dict):
            continue
        recorded = event.payload.get(DERIVED_FROM_KEY)
        # jsonb containment (event_visible_sql's <@) counts a lone string as a list of one.
        if isinstance(recorded, str):
            recorded = [recorded]
        if isinstance(recorded, list):
            kinds.update(kind for kind in recorded if isinstance(kind, str))
    return sorted(kinds)


# --- Ledger browser ----------------------------------------------------------------------------

EVENT_PAGE_SIZE = 50
# Enough for a person to read; a payload may hold up to LEDGER_MAX_PAYLOAD_BYTES.
EVENT_PAYLOAD_PREVIEW_CHARS = 2000


@dataclass(frozen=True)
class EventFilters:
    actor: str = ""
    kind: str = ""
    run_id: str = ""
    since: datetime | None = None
    before: datetime | None = None


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    # The seq to pass as ``before_seq`` for the next (older) page; None on the last page.
    next_before_seq: int | None


# The first seq whose event was appended at or after a moment, by binary search over seq in one
# statement: about log2(chain length) probes of the (tenant, seq) unique index, so a time filter
# needs no index of its own. It relies on two properties of a chain: seqs run 1..n without gaps
# (event_chain_verify proves it) and created_at never decreases along them (events_append takes
# the timestamp under the tenant's write lock). Returns n + 1 when every event is older.
FIRST_SEQ_AT_SQL = """
WITH RECURSIVE probe(lo, hi) AS (
    SELECT 1::bigint, coalesce(
        (SELECT seq FROM ledger_event WHERE tenant_id = %(tenant)s ORDER BY seq DESC LIMIT 1), 0
    ) + 1
  UNION ALL
    SELECT CASE WHEN e.created_at >= %(moment)s THEN p.lo ELSE (p.lo + p.hi) / 2 + 1 END,
           CASE WHEN e.created_at >= %(moment)s THEN (p.lo + p.hi) / 2 ELSE p.hi END
    FROM probe AS p
    JOIN ledger_event AS e ON e.tenant_id = %(tenant)s AND e.seq = (p.lo + p.hi) / 2
    WHERE p.lo < p.hi
)
SELECT min(hi) FROM probe
"""


def event_first_seq_at(*, tenant: Tenant, moment: datetime) -> int:
    with connection.cursor() as cursor:
        cursor.execute(FIRST_SEQ_AT_SQL, {"tenant": tenant.pk, "moment": moment})
        return int(cursor.fetchone()[0])


def events_browse(
    *,
    tenant: Tenant,
    filters: EventFilters,
    before_seq: int | None = None,
    limit: int = EVENT_PAGE_SIZE,
) -> EventPage:
    """The tenant's events, newest first, a page at a time.

    Keyset pagination on seq (never OFFSET): every filter combines with seq in one of the
    event indexes ((tenant, seq), (tenant, kind, seq), (tenant, actor, seq), (tenant, run_id,
    seq)), so a page reads about ``limit`` index entries however deep it is in a long chain.
    Time bounds become seq bounds first (``event_first_seq_at``).
    """
    events = Event.objects.filter(tenant=tenant)
    if filters.actor:
        events = events.filter(actor=filters.actor)
    if filters.kind:
        events = events.filter(kind=filters.kind)
    if filters.run_id:
        events = events.filter(run_id=filters.run_id)
    if filters.since is not None:
        events = events.filter(seq__gte=event_first_seq_at(tenant=tenant, moment=filters.since))
    if filters.before is not None:
        events = events.filter(seq__lt=event_first_seq_at(tenant=tenant, moment=filters.before))
    if before_seq is not None:
        events = events.filter(seq__lt=before_seq)
    rows = list(events.order_by("-seq")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return EventPage(events=rows, next_before_seq=rows[-1].seq if more else None)


# Distinct kinds by a loose index scan of (tenant, kind, seq): one probe per kind, instead of
# reading every event of the tenant as SELECT DISTINCT would.
EVENT_KINDS_SQL = """
WITH RECURSIVE kinds(kind) AS (
    (SELECT kind FROM ledger_event WHERE tenant_id = %(tenant)s ORDER BY kind LIMIT 1)
  UNION ALL
    SELECT (SELECT e.kind FROM ledger_event AS e
            WHERE e.tenant_id = %(tenant)s AND e.kind > k.kind ORDER BY e.kind LIMIT 1)
    FROM kinds AS k WHERE k.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL LIMIT %(limit)s
"""


def event_kinds(*, tenant: Tenant, limit: int = 200) -> list[str]:
    """The kinds of event the tenant's ledger holds, alphabetically (for a filter's choices)."""
    with connection.cursor() as cursor:
        cursor.execute(EVENT_KINDS_SQL, {"tenant": tenant.pk, "limit": limit})
        return [row[0] for row in cursor.fetchall()]


def chain_verification_latest(*, tenant: Tenant) -> ChainVerification | None:
    """The tenant's latest on-demand verification ("Verify now" or verify_ledger), if any."""
    return ChainVerification.objects.filter(tenant=tenant).order_by("-checked_at", "-pk").first()
