"""One agent's trust memory as the design note's per-agent document (``memory/<Agent>.json``).

Export (trust.interchange.selectors) reads the tables; import, here, writes the same rows
through the same events the services write (so a rebuild reproduces them), keeping what the
document recorded: dissents keep their depth, novelty and citations, overrides their regret and
who reverted them when and why, the score its history. The score itself is evidence's to decide:
an import computes it from the imported dissents and overrides with the scoring every other write
uses, and the document's ``trust_score`` is only recorded as what the document claimed. Export,
import elsewhere, export again gives the same document (tests/trust/test_interchange.py compares
every field of the rows, so a field the document forgets fails there).

Beyond the design note's layout the document carries ``impact_set_at``, ``novelty`` and
``novelty_known`` per dissent, ``reverted_at`` and ``revert_reason`` per override and
``components`` per history entry; a document without them still imports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from config.api import ApiError, Conflict
from config.datetimes import client_datetime_parse
from ledger.models import Agent, Tenant
from ledger.services import (
    EventDraft,
    agent_create,
    agent_update,
    tenant_write_lock,
)
from trust.rounds.models import Dissent, DissentEmbedding, Override
from trust.rounds.overrides import override_logged_payload
from trust.rounds.policies import NOTE_MAX_CHARS, TEXT_MAX_CHARS
from trust.rounds.services import EMBEDDING_BATCH, dissent_logged_payload, embed_or_none
from trust.scores.models import TrustScoreChange
from trust.scores.scoring import MAX_DEPTH, MAX_NOVELTY, PRIOR, Depth, dissent_depth, text_hash
from trust.scores.services import score_changed_payload, trust_recompute

# How far a recorded depth may be from the sum of its recorded parts: the float sum, twice.
_DEPTH_TOLERANCE = 1e-9


def _invalid(path: str, problem: str) -> ApiError:
    return ApiError(
        code="invalid_document",
        message=f"{path}: {problem}",
        details={"path": path, "problem": problem},
    )


class DocumentReader:
    """Typed access to a document's fields, naming the path of the first bad one."""

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise _invalid(path or "(document)", "must be an object")
        self.value: dict[str, Any] = value
        self.path = path

    def _at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def invalid(self, key: str, problem: str) -> ApiError:
        return _invalid(self._at(key), problem)

    def text(self, key: str, *, default: str | None = None, limit: int = 200) -> str:
        value = self.value.get(key, default)
        if value is None and default is not None:
            value = default
        if not isinstance(value, str):
            raise _invalid(self._at(key), "must be a string")
        if len(value) > limit:
            raise _invalid(self._at(key), f"is longer than {limit} characters")
        return value

    def body(self, key: str) -> str:
        value = self.text(key, limit=TEXT_MAX_CHARS)
        if not value.strip():
            raise _invalid(self._at(key), "is empty")
        return value

    def when(self, key: str, *, required: bool = True) -> datetime | None:
        value = self.value.get(key)
        if value is None and not required:
            return None
        moment = client_datetime_parse(value, assume_utc=False) if isinstance(value, str) else None
        if moment is None:
            raise _invalid(self._at(key), "must be an ISO 8601 timestamp with a time zone")
        return moment

    def number(self, key: str, *, low: float, high: float, default: float | None = None) -> float:
        value = self.value.get(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise _invalid(self._at(key), f"must be a number from {low} to {high}")
        return float(value)

    def choice(self, key: str, *, choices: Sequence[str], default: str) -> str:
        value = self.value.get(key)
        if value is None:
            return default
        if value not in choices:
            raise _invalid(self._at(key), f"must be one of {', '.join(choices)}")
        return str(value)

    def flag(self, key: str, *, nullable: bool) -> bool | None:
        value = self.value.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, bool):
            raise _invalid(
                self._at(key), "must be true or false" + (" or null" if nullable else "")
            )
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.value.get(key, {})
        if not isinstance(value, dict):
            raise _invalid(self._at(key), "must be an object")
        return value

    def items(self, key: str) -> list[DocumentReader]:
        value = self.value.get(key, [])
        if not isinstance(value, list):
            raise _invalid(self._at(key), "must be a list")
        return [DocumentReader(item, f"{self._at(key)}[{n}]") for n, item in enumerate(value)]

    def names(self, key: str) -> list[str]:
        value = self.value.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _invalid(self._at(key), "must be a list of strings")
        return list(value)


def _dissent_depth(item: DocumentReader, *, text: str, citations: int) -> tuple[Depth, bool]:
    """The depth of an imported dissent, and whether its novelty is known.

    The length and citation parts are always recomputed from the text. The novelty is the
    one part that needs the vectors of the dissents before it, so it is taken as recorded; a
    document of the design note's layout has only the total, and then the rest of the total is
    the novelty (unknown to us, hence novelty_known false). A document without depths gets
    length and citations only, as if the embedder had been down.
    """
    parts = dissent_depth(text=text, citations=citations, max_similarity=None)
    recorded = None
    if item.value.get("depth_score") is not None:
        recorded = item.number("depth_score", low=0.0, high=MAX_DEPTH)
    if item.value.get("novelty") is None:
        total = parts.depth if recorded is None else recorded
        novelty = max(total - parts.length - parts.citations, 0.0)
        return replace(parts, novelty=novelty, depth=total), False
    novelty = item.number("novelty", low=0.0, high=MAX_NOVELTY)
    total = min(parts.length + parts.citations + novelty, MAX_DEPTH)
    if recorded is not None and abs(recorded - total) > _DEPTH_TOLERANCE:
        raise item.invalid(
            "depth_score",
            f"is not its parts' sum: length {parts.length} + citations {parts.citations} "
            f"+ novelty {novelty}, capped at {MAX_DEPTH}, is {total}",
        )
    known = bool(item.flag("novelty_known", nullable=True))
    return replace(parts, novelty=novelty, depth=total), known


def _dissent_row(item: DocumentReader, agent: Agent, now: datetime) -> Dissent:
    occurred = item.when("timestamp")
    assert occurred is not None
    text = item.body("dissent_text")
    citations = item.names("rubric_citations")
    depth, novelty_known = _dissent_depth(item, text=text, citations=len(citations))
    impact = item.flag("impact", nullable=True)
    impact_set_at = None
    if impact is not None:
        impact_set_at = item.when("impact_set_at", required=False) or occurred
    return Dissent(
        tenant_id=agent.tenant_id,
        agent=agent,
        round_id=item.text("round_id", default=""),
        occurred_at=occurred,
        created_at=now,
        context=item.mapping("context"),
        text=text,
        rubric_citations=citations,
        rubric_version=None,
        length_score=depth.length,
        citation_score=depth.citations,
        novelty=depth.novelty,
        novelty_known=novelty_known,
        depth_score=depth.depth,
        impact=impact,
        feedback_incorporated=item.flag("feedback_incorporated", nullable=True),
        impact_set_at=impact_set_at,
        imported=True,
    )


def _override_row(item: DocumentReader, agent: Agent, now: datetime) -> Override:
    occurred = item.when("timestamp")
    assert occurred is not None
    agent_output = item.body("agent_output")
    human_decision = item.body("human_decision")
    deadline = item.when("auto_check_deadline", required=False) or occurred + timedelta(
        hours=settings.OVERRIDE_CHECK_HOURS
    )
    regret = item.flag("regret", nullable=True) or False
    reverted_by = item.value.get("reverted_by")
    if reverted_by is not None:
        reverted_by = item.text("reverted_by")
    reverted_at = item.when("reverted_at", required=False)
    reverted = regret or reverted_by is not None or reverted_at is not None
    reason = item.choice(
        "revert_reason",
        choices=Override.RevertReason.values,
        default=Override.RevertReason.IMPORTED.value,
    )
    return Override(
        tenant_id=agent.tenant_id,
        agent=agent,
        round_id=item.text("round_id", default=""),
        occurred_at=occurred,
        created_at=now,
        context=item.mapping("context"),
        agent_output=agent_output,
        human_decision=human_decision,
        agent_output_hash=text_hash(agent_output),
        decision_hash=text_hash(human_decision),
        decided_by=item.text("decided_by", default=""),
        regret=regret,
        auto_check_deadline=deadline,
        reverted_by=reverted_by or "",
        # A document without the time of the revert: the import is when we learnt of it.
        reverted_at=(reverted_at or now) if reverted else None,
        revert_reason=reason if reverted else "",
        revert_note=item.text("revert_note", default="", limit=NOTE_MAX_CHARS) if reverted else "",
    )


def _history_rows(document: DocumentReader, agent: Agent) -> list[TrustScoreChange]:
    rows = []
    for item in document.items("trust_score_history"):
        at = item.when("timestamp")
        assert at is not None
        rows.append(
            TrustScoreChange(
                tenant_id=agent.tenant_id,
                agent=agent,
                at=at,
                score=item.number("score", low=0.0, high=1.0),
                reason=item.text("reason", limit=64),
                components=item.mapping("components"),
            )
        )
    return rows


def _agent_fields(document: DocumentReader) -> dict[str, Any]:
    name = document.text("agent_name")
    if not name.strip():
        raise _invalid("agent_name", "is empty")
    return {
        "name": name,
        "model": document.text("model", default=""),
        "primary_role": document.text("primary_role", default="", limit=100),
        "probation_until": document.when("probation_until", required=False),
    }


def agent_import(
    *, tenant: Tenant, document: Any, actor: str, now: datetime | None = None
) -> Agent:
    """Bring one agent's document into the tenant: the agent (created if missing) and its
    dissents, overrides, score history and rounds. An agent that already has trust evidence is
    refused (409 ``agent_has_trust_history``): two histories cannot be merged faithfully.

    The agent's score starts where the imported history ends and is then recomputed from the
    imported evidence (reason ``imported`` when that moves it). The document's ``trust_score``
    is checked and recorded in ``trust.rounds_imported`` as ``trust_score_claimed``, never used:
    a score that ignored 20 regretted overrides would otherwise stand until the next recompute.
    """
    moment = now or timezone.now()
    reader = DocumentReader(document, "")
    fields = _agent_fields(reader)
    rounds = reader.value.get("rounds_participated", 0)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise _invalid("rounds_participated", "must be a whole number, 0 or more")
    # Rows are built (and so checked) against a stand-in agent before anything is written.
    draft_agent = Agent(tenant=tenant, name=fields["name"])
    dissents = [_dissent_row(i, draft_agent, moment) for i in reader.items("dissent_history")]
    overrides = [_override_row(i, draft_agent, moment) for i in reader.items("override_history")]
    history = _history_rows(reader, draft_agent)
    claimed = None
    if reader.value.get("trust_score") is not None:
        claimed = reader.number("trust_score", low=0.0, high=1.0)
    vectors, model = None, ""
    if dissents:
        vectors, model = _embed_all([d.text for d in dissents])
    with transaction.atomic():
        tenant_write_lock(tenant)
        agent = _agent_for_import(tenant=tenant, fields=fields, actor=actor)
        for dissent in dissents:
            dissent.agent = agent
        for override in overrides:
            override.agent = agent
        for change in history:
            change.agent = agent
        drafts = _write_rows(
            tenant=tenant,
            agent=agent,
            dissents=dissents,
            overrides=overrides,
            history=history,
            actor=actor,
        )
        if vectors is not None:
            DissentEmbedding.objects.bulk_create(
                DissentEmbedding(
                    tenant=tenant, dissent_id=d.pk, agent=agent, embedding=v, model=model
                )
                for d, v in zip(dissents, vectors, strict=True)
            )
        # Where the history ends is where the agent stands (a rebuild replays it so); the
        # recompute moves it from there if the evidence says otherwise.
        agent.trust_score = history[-1].score if history else PRIOR
        agent.rounds_participated = rounds
        agent.save(update_fields=["trust_score", "rounds_participated"])
        drafts.append(
            EventDraft(
                kind="trust.rounds_imported",
                actor=actor,
                payload={
                    "agent_id": agent.pk,
                    "rounds_participated": rounds,
                    "trust_score_claimed": claimed,
                },
            )
        )
        trust_recompute(
            tenant=tenant, agent_ids=[agent.pk], reason="imported", now=moment, preceded_by=drafts
        )
    agent.refresh_from_db(fields=["trust_score"])
    return agent


def _embed_all(texts: list[str]) -> tuple[list[list[float]] | None, str]:
    """All the vectors or none: the backfill fills what an outage left out."""
    vectors: list[list[float]] = []
    model = ""
    for start in range(0, len(texts), EMBEDDING_BATCH):
        batch, model = embed_or_none(texts[start : start + EMBEDDING_BATCH])
        if batch is None:
            return None, ""
        vectors.extend(batch)
    return vectors, model


def _agent_for_import(*, tenant: Tenant, fields: dict[str, Any], actor: str) -> Agent:
    agent: Agent | None = Agent.objects.filter(tenant=tenant, name=fields["name"]).first()
    if agent is None:
        agent = agent_create(
            tenant=tenant,
            name=fields["name"],
            model=fields["model"],
            primary_role=fields["primary_role"],
            actor=actor,
        )
    elif (
        Dissent.objects.filter(agent=agent).exists()
        or Override.objects.filter(agent=agent).exists()
        or TrustScoreChange.objects.filter(agent=agent).exists()
    ):
        raise Conflict(
            code="agent_has_trust_history",
            message=f"{agent.name} already has trust history here; import into a fresh agent.",
            details={"agent_id": agent.pk},
        )
    changes = {k: v for k, v in fields.items() if k != "name"}
    return agent_update(agent=agent, actor=actor, changes=changes)


def _write_rows(
    *,
    tenant: Tenant,
    agent: Agent,
    dissents: list[Dissent],
    overrides: list[Override],
    history: list[TrustScoreChange],
    actor: str,
) -> list[EventDraft]:
    """Insert the rows and return their events, in the order a replay needs them."""
    Dissent.objects.bulk_create(dissents)
    Override.objects.bulk_create(overrides)
    TrustScoreChange.objects.bulk_create(history)
    drafts = [
        EventDraft(kind="dissent.logged", actor=actor, payload=dissent_logged_payload(d))
        for d in dissents
    ]
    drafts += [
        EventDraft(
            kind="dissent.impact_set",
            actor=actor,
            payload={
                "dissent_id": d.pk,
                "impact": d.impact,
                "feedback_incorporated": d.feedback_incorporated,
                "at": d.impact_set_at.isoformat(),
            },
        )
        for d in dissents
        if d.impact is not None and d.impact_set_at is not None
    ]
    drafts += [
        EventDraft(kind="override.logged", actor=actor, payload=override_logged_payload(o))
        for o in overrides
    ]
    # One event per way of being reverted, as the services log a batch of reverts.
    reverted: dict[tuple[str, bool, str, datetime, str], list[int]] = {}
    for o in overrides:
        if o.reverted_at is not None:
            way = (o.reverted_by, o.regret, o.revert_reason, o.reverted_at, o.revert_note)
            reverted.setdefault(way, []).append(o.pk)
    drafts += [
        EventDraft(
            kind="override.reverted",
            actor=actor,
            payload={
                "override_ids": ids,
                "reverted_by": by,
                "reason": reason,
                "note": note,
                "regret": regret,
                "at": at.isoformat(),
            },
        )
        for (by, regret, reason, at, note), ids in reverted.items()
    ]
    previous: float | None = None
    for change in history:
        drafts.append(
            EventDraft(
                kind="trust.score_changed",
                actor=actor,
                payload=score_changed_payload(change, previous),
            )
        )
        previous = change.score
    return drafts
