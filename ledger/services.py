"""Writes to the ledger app: the event log and the identity it owns.

Every change here appends an event in the same transaction as the row it changes, so the log is a
complete record of who did what.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework import status

from config import metrics
from config.api import ApiError, Conflict
from ledger import key_cache
from ledger.chain import event_hash
from ledger.models import (
    Agent,
    ApiKey,
    Event,
    IdempotencyRecord,
    Membership,
    RecallSettings,
    Role,
    Tenant,
)
from ledger.names import (
    HUMAN_ACTOR_PREFIX,
    NameProblem,
    agent_name_key,
    agent_name_problem,
    human_actor_problem,
    label_problem,
    name_normal_form,
)
from ledger.names import SYSTEM_ACTOR as SYSTEM_ACTOR  # the ledger's actors are imported from here
from ledger.projections import AGENT_DELETED, agent_deletion_steps, projections_after_append
from ledger.receipts import receipt_record

API_KEY_PREFIX = "amk_"
_VISIBLE_PREFIX_LENGTH = 12


def actor_for_user(user: AbstractBaseUser) -> str:
    return f"human:{user.get_username()}"


def actor_for_api_key(api_key: ApiKey) -> str:
    """An agent-scoped key acts as its agent; a tenant-wide key is named by its visible prefix."""
    if api_key.agent is not None:
        return api_key.agent.name
    return f"api_key:{api_key.prefix}"


# --- Events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventDraft:
    kind: str
    actor: str
    payload: dict[str, Any] = field(default_factory=dict)
    run_id: str = ""
    round_id: str = ""
    turn: int = 0


def _payloads_as_stored(payloads: Sequence[dict[str, Any]]) -> list[Any]:
    """Each payload exactly as PostgreSQL's jsonb will hand it back.

    jsonb rewrites some values (``1e+20`` comes back as the integer ``100000000000000000000``),
    and verification later hashes what it reads. Hashing the round-tripped value keeps the two
    identical whatever the client sent.
    """
    texts = []
    for payload in payloads:
        try:
            text = json.dumps(payload, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ApiError(
                code="invalid_payload", message=f"The payload is not storable JSON: {exc}"
            ) from exc
        if "\\u0000" in text:
            raise ApiError(
                code="invalid_payload", message="The payload contains a NUL character (\\u0000)."
            )
        texts.append(text)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT value::text FROM unnest(%s::jsonb[]) WITH ORDINALITY AS t(value, position)"
            " ORDER BY position",
            [texts],
        )
        return [json.loads(row[0]) for row in cursor.fetchall()]


def tenant_write_lock(tenant: Tenant) -> None:
    """Take the tenant's ledger lock for the rest of the transaction (re-entrant).

    Appends take it. Writers of a tenant's memories take it before they touch any row, so that
    everyone who waits for a row lock already holds it and no two writers wait on each other.
    """
    tenant_write_lock_id(tenant.pk)


def tenant_write_lock_id(tenant_id: int) -> None:
    """``tenant_write_lock`` by id; take several in ascending id order.

    A transaction that holds the lock already does not ask PostgreSQL again: the writes of one
    request take it three or four times (the service, the chain append, the trust recompute),
    and under load every statement made while holding it lengthens every other writer's wait.
    """
    if _tenant_lock_held(tenant_id):
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('agent-memory:ledger:' || %s, 0))",
            [tenant_id],
        )
    transaction.on_commit(TenantLockHeld(tenant_id))


@dataclass(frozen=True)
class TenantLockHeld:
    """A commit hook that does nothing: its presence among the transaction's hooks says that the
    transaction holds the tenant's lock. Django drops the hooks of a transaction that ends and
    of a savepoint rolled back, exactly when PostgreSQL releases the locks taken in them, so the
    mark lives as long as the lock. Outside a transaction Django runs the hook at once and keeps
    nothing (the lock was released with the statement)."""

    tenant_id: int

    def __call__(self) -> None:
        pass


def _tenant_lock_held(tenant_id: int) -> bool:
    # Django keeps (savepoint ids, hook, robust) per hook.
    return connection.in_atomic_block and any(
        isinstance(entry[1], TenantLockHeld) and entry[1].tenant_id == tenant_id
        for entry in connection.run_on_commit
    )


def _lock_chain(tenant: Tenant) -> tuple[int, str]:
    """Serialise appends for one tenant and return the chain head (last seq, last hash).

    A transaction-scoped advisory lock, so concurrent web and worker processes queue here instead
    of forking the chain; it is released at commit or rollback.
    """
    tenant_write_lock(tenant)
    head = Event.objects.filter(tenant=tenant).order_by("-seq").values_list("seq", "hash").first()
    return head if head is not None else (0, Event.GENESIS_HASH)


def events_append(*, tenant: Tenant, drafts: Sequence[EventDraft]) -> list[Event]:
    """Append events to the tenant's chain, in order, atomically."""
    if not drafts:
        return []
    # Before the lock: a payload refused here keeps no writer waiting.
    payloads = _payloads_as_stored([draft.payload for draft in drafts])
    # No savepoint inside a caller's transaction: an append that fails must fail the write it
    # records (two statements fewer, made while holding the tenant's lock).
    with transaction.atomic(savepoint=False):
        seq, prev_hash = _lock_chain(tenant)
        now = timezone.now()
        events = []
        for draft, payload in zip(drafts, payloads, strict=True):
            seq += 1
            digest = event_hash(
                tenant_id=tenant.pk,
                seq=seq,
                run_id=draft.run_id,
                round_id=draft.round_id,
                turn=draft.turn,
                actor=draft.actor,
                kind=draft.kind,
                payload=payload,
                created_at=now,
                prev_hash=prev_hash,
            )
            events.append(
                Event(
                    tenant=tenant,
                    seq=seq,
                    run_id=draft.run_id,
                    round_id=draft.round_id,
                    turn=draft.turn,
                    actor=draft.actor,
                    kind=draft.kind,
                    payload=payload,
                    created_at=now,
                    prev_hash=prev_hash,
                    hash=digest,
                )
            )
            prev_hash = digest
        created = Event.objects.bulk_create(events)
        receipt_record(tenant=tenant, seq=seq, digest=prev_hash)
        transaction.on_commit(partial(metrics.ledger_appended, len(created)))
        ids = [event.pk for event in created]
        # Robust: the events are committed, so a failure to queue their follow-up work (Redis
        # down mid-request) must not turn the answer into an error; the backfill job catches up.
        transaction.on_commit(lambda: projections_after_append(event_ids=ids), robust=True)
        return created


def event_append(
    *,
    tenant: Tenant,
    kind: str,
    actor: str,
    payload: dict[str, Any] | None = None,
    run_id: str = "",
    round_id: str = "",
    turn: int = 0,
) -> Event:
    draft = EventDraft(
        kind=kind, actor=actor, payload=payload or {}, run_id=run_id, round_id=round_id, turn=turn
    )
    return events_append(tenant=tenant, drafts=[draft])[0]


# --- Names ---------------------------------------------------------------------------------------

LABEL_MAX_LENGTH = 200


def _name_refused(problem: NameProblem, *, code: str, subject: str) -> ApiError:
    return ApiError(
        code=code, message=f"{subject} {problem.message}", details={"reason": problem.reason}
    )


def agent_name_clean(raw: str) -> str:
    """``raw`` in normal form, or 400 ``invalid_agent_name`` saying what is wrong with it
    (the rule: ``ledger.names``)."""
    name = name_normal_form(raw)
    problem = agent_name_problem(name)
    if problem is not None:
        raise _name_refused(problem, code="invalid_agent_name", subject=f"The agent name {name!r}")
    return name


def _label_clean(raw: str, *, code: str, subject: str) -> str:
    label = name_normal_form(raw)
    problem = label_problem(label, max_length=LABEL_MAX_LENGTH)
    if problem is not None:
        raise _name_refused(problem, code=code, subject=f"{subject} {label!r}")
    return label


# --- Tenants and people ------------------------------------------------------------------------


def tenant_create(*, name: str, slug: str, actor: str = SYSTEM_ACTOR) -> Tenant:
    name = _label_clean(name, code="invalid_tenant_name", subject="The tenant name")
    try:
        validate_slug(slug)
    except ValidationError as exc:
        raise ApiError(
            code="invalid_tenant_slug",
            message=f"The tenant slug {slug!r} may hold only ASCII letters, digits, - and _.",
        ) from exc
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise Conflict(code="tenant_slug_taken", message=f"A tenant '{slug}' already exists.")
        tenant = Tenant.objects.create(name=name, slug=slug)
        event_append(
            tenant=tenant, kind="tenant.created", actor=actor, payload={"name": name, "slug": slug}
        )
    return tenant


def membership_grant(
    *, tenant: Tenant, user: AbstractBaseUser, role: str, actor: str = SYSTEM_ACTOR
) -> Membership:
    """Seats have their own services (``ledger.people.services``); kept here for its callers."""
    from ledger.people.services import membership_grant as grant

    return grant(tenant=tenant, user=user, role=role, actor=actor)


# --- Agents ------------------------------------------------------------------------------------


def _agent_name_taken(tenant: Tenant, name: str) -> Conflict:
    holder = (
        Agent.objects.filter(tenant=tenant, name_key=agent_name_key(name))
        .values_list("name", flat=True)
        .first()
    )
    if holder is None or holder == name:
        message = f"This tenant already has an agent named '{name}'."
    else:
        message = (
            f"This tenant already has an agent named '{holder}', which differs from '{name}' "
            "only in case or in look-alike characters."
        )
    return Conflict(
        code="agent_name_taken", message=message, details={"name": name, "taken_by": holder}
    )


def agent_create(
    *,
    tenant: Tenant,
    name: str,
    actor: str,
    model: str = "",
    primary_role: str = "",
    probation_until: datetime | None = None,
) -> Agent:
    name = agent_name_clean(name)
    payload: dict[str, Any] = {"name": name, "model": model, "primary_role": primary_role}
    if probation_until is not None:
        payload["probation_until"] = probation_until.isoformat()
    try:
        with transaction.atomic():
            agent = Agent.objects.create(
                tenant=tenant,
                name=name,
                model=model,
                primary_role=primary_role,
                probation_until=probation_until,
            )
            event_append(
                tenant=tenant,
                kind="agent.registered",
                actor=actor,
                payload={"agent_id": agent.pk, **payload},
            )
    except IntegrityError as exc:
        raise _agent_name_taken(tenant, name) from exc
    return agent


AGENT_EDITABLE_FIELDS = ("name", "model", "primary_role", "probation_until")


def agent_update(*, agent: Agent, actor: str, changes: dict[str, Any]) -> Agent:
    unknown = set(changes) - set(AGENT_EDITABLE_FIELDS)
    if unknown:
        raise ApiError(
            code="field_not_editable", message=f"Cannot change: {', '.join(sorted(unknown))}."
        )
    if "name" in changes:
        changes = {**changes, "name": agent_name_clean(str(changes["name"]))}
    changed = {key: value for key, value in changes.items() if getattr(agent, key) != value}
    if not changed:
        return agent
    for key, value in changed.items():
        setattr(agent, key, value)
    try:
        with transaction.atomic():
            agent.save(update_fields=list(changed))
            event_append(
                tenant=agent.tenant,
                kind="agent.updated",
                actor=actor,
                payload={
                    "agent_id": agent.pk,
                    "changes": {
                        key: value.isoformat() if hasattr(value, "isoformat") else value
                        for key, value in changed.items()
                    },
                },
            )
    except IntegrityError as exc:
        agent.refresh_from_db()
        raise _agent_name_taken(agent.tenant, str(changes["name"])) from exc
    return agent


def agent_delete(*, agent: Agent, actor: str) -> None:
    """Delete an agent with everything that is its own, recorded by one ``agent.deleted``.

    Every row that points at the agent goes with it (its memories, content items and snapshots,
    dissents, overrides, score history, round seats, gaming flags, API keys: the foreign keys'
    cascade), and so do the keys that open its memories' content sealed in the ledger, which the
    memory app destroys in its deletion step (crypto-shredding, as a single memory's delete
    does). The event counts what went per table (``removed``); a rebuild replays it into every
    projection, which removes all of the agent's rows there, so the rebuilt tables equal these.
    """
    agent_id, name = agent.pk, agent.name
    with transaction.atomic():
        # First, as every writer of the tenant's memories and trust rows takes it first.
        tenant_write_lock(agent.tenant)
        removed: Counter[str] = Counter()
        for step in agent_deletion_steps():
            removed.update(step(agent=agent))
        _, cascaded = agent.delete()
        removed.update(cascaded)
        del removed[Agent._meta.label]
        event_append(
            tenant=agent.tenant,
            kind=AGENT_DELETED,
            actor=actor,
            payload={
                "agent_id": agent_id,
                "name": name,
                "removed": {label: n for label, n in sorted(removed.items()) if n},
            },
        )


# --- API keys ----------------------------------------------------------------------------------


def api_key_hash(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    role: str,
    actor: str,
    agent: Agent | None = None,
    created_by: AbstractBaseUser | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never stored or shown again."""
    name = _label_clean(name, code="invalid_api_key_name", subject="The API key name")
    if role not in Role.values:
        raise ApiError(
            code="invalid_role", message=f"Role must be one of {', '.join(Role.values)}."
        )
    if agent is not None and agent.tenant_id != tenant.pk:
        raise ApiError(
            code="not_found", message="No such agent.", status_code=status.HTTP_404_NOT_FOUND
        )
    if agent is not None and role == Role.ADMIN:
        # Admin means managing the tenant, which a key acting as one agent never does (the
        # database refuses such a row too: constraint api_key_admin_is_tenant_wide).
        raise ApiError(
            code="agent_scoped_admin_key",
            message="An admin key is always tenant-wide: create it without an agent, or give "
            f"the key for agent {agent.name!r} the role agent or reviewer.",
            details={"role": role, "agent": agent.name},
        )
    raw_key = API_KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        api_key = ApiKey.objects.create(
            tenant=tenant,
            name=name,
            prefix=raw_key[:_VISIBLE_PREFIX_LENGTH],
            key_hash=api_key_hash(raw_key),
            role=role,
            agent=agent,
            created_by=created_by,  # type: ignore[misc]
        )
        event_append(
            tenant=tenant,
            kind="api_key.created",
            actor=actor,
            payload={
                "key_id": api_key.pk,
                "prefix": api_key.prefix,
                "name": name,
                "role": role,
                "agent": agent.name if agent else None,
            },
        )
    return api_key, raw_key


def api_key_revoke(*, api_key: ApiKey, actor: str) -> ApiKey:
    with transaction.atomic():
        # Conditional update: revoking twice keeps the first revocation time and logs once.
        revoked = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if revoked:
            # Every process's cache of verified keys (ledger.key_cache) forgets it.
            key_cache.api_keys_changed()
            event_append(
                tenant=api_key.tenant,
                kind="api_key.revoked",
                actor=actor,
                payload={"key_id": api_key.pk, "prefix": api_key.prefix},
            )
    api_key.refresh_from_db()
    return api_key


def api_key_mark_used(*, api_key: ApiKey) -> bool:
    """Record use at most once a minute per key, so authentication is not a write per request.

    True when this call recorded it (or found another request recording it): ``last_used_at``
    of the instance is then now."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.API_KEY_LAST_USED_RESOLUTION_SECONDS)
    if api_key.last_used_at is not None and api_key.last_used_at >= cutoff:
        return False  # the row just read says so: no statement at all
    with transaction.atomic():
        # SKIP LOCKED: an API request runs in one transaction (ledger.scoping), so a concurrent
        # request of the same key that is recording its use holds the row until it answers.
        # It records the use for both; waiting for it would queue this request behind it.
        # NO KEY: the lock an UPDATE takes anyway; a plain FOR UPDATE would also block the
        # foreign-key checks of rows that reference the key until this request ends, and
        # deadlock with a request that waits on this one.
        unlocked = (
            ApiKey.objects.filter(pk=api_key.pk)
            .filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=cutoff))
            .select_for_update(skip_locked=True, no_key=True)
            .values("pk")
        )
        ApiKey.objects.filter(pk__in=unlocked).update(last_used_at=now)
    api_key.last_used_at = now
    return True


# --- Client appends ------------------------------------------------------------------------------

KIND_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
MAX_KIND_LENGTH = 64


def _client_event_problem(
    draft: EventDraft, *, known_agents: set[str], reserved: frozenset[str]
) -> tuple[str, str] | None:
    if len(draft.kind) > MAX_KIND_LENGTH or not KIND_PATTERN.match(draft.kind):
        return (
            "invalid_kind",
            f"Kind {draft.kind!r} must be dotted lowercase words (like 'agent.spoke'), "
            f"at most {MAX_KIND_LENGTH} characters.",
        )
    if draft.kind in reserved:
        return (
            "reserved_kind",
            f"Kind {draft.kind!r} is written by the service itself; use its own endpoint.",
        )
    if draft.turn < 0:
        return ("invalid_turn", "Turn must be zero or positive.")
    if draft.actor.startswith(HUMAN_ACTOR_PREFIX):
        problem = human_actor_problem(draft.actor)
        if problem is not None:
            return ("invalid_actor", f"Actor {draft.actor!r}: the name {problem.message}")
        return None
    if draft.actor != SYSTEM_ACTOR and draft.actor not in known_agents:
        return (
            "unknown_actor",
            f"Actor {draft.actor!r} is not an agent of this tenant "
            "(nor 'system' or 'human:<name>').",
        )
    return None


def events_append_from_client(*, tenant: Tenant, drafts: Sequence[EventDraft]) -> list[Event]:
    """Validate a client's events as a whole, then append them; one bad event writes nothing."""
    from ledger.projections import reserved_kinds

    named = {draft.actor for draft in drafts}
    known_agents = set(
        Agent.objects.filter(tenant=tenant, name__in=named).values_list("name", flat=True)
    )
    reserved = reserved_kinds()
    for index, draft in enumerate(drafts):
        size = len(json.dumps(draft.payload, ensure_ascii=False, default=str).encode("utf-8"))
        if size > settings.LEDGER_MAX_PAYLOAD_BYTES:
            raise ApiError(
                code="payload_too_large",
                message=f"{f'Event {index}: ' if len(drafts) > 1 else ''}An event payload is "
                f"{size} bytes; the limit is {settings.LEDGER_MAX_PAYLOAD_BYTES} bytes.",
                status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
                details={"index": index},
            )
        problem = _client_event_problem(draft, known_agents=known_agents, reserved=reserved)
        if problem is not None:
            code, message = problem
            prefix = f"Event {index}: " if len(drafts) > 1 else ""
            raise ApiError(code=code, message=prefix + message, details={"index": index})
    return events_append(tenant=tenant, drafts=drafts)


IDEMPOTENCY_EXPIRE_BATCH = 5000


def idempotency_records_expire(*, now: datetime | None = None) -> int:
    """Delete stored idempotent answers past their retention, in bounded batches. Idempotent."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.IDEMPOTENCY_RETENTION_HOURS)
    deleted = 0
    while True:
        ids = list(
            IdempotencyRecord.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)[
                :IDEMPOTENCY_EXPIRE_BATCH
            ]
        )
        if not ids:
            return deleted
        deleted += IdempotencyRecord.objects.filter(pk__in=ids).delete()[0]


def recall_settings_update(
    *, tenant: Tenant, actor: str, changes: dict[str, Any]
) -> RecallSettings:
    """Change the tenant's recall rules; the change is logged with its new values."""
    with transaction.atomic():
        current = RecallSettings.for_tenant(tenant)
        for key, value in changes.items():
            setattr(current, key, value)
        current.save()
        event_append(
            tenant=tenant, kind="recall_settings.updated", actor=actor, payload={"changes": changes}
        )
    return current
