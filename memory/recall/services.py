"""Reflection: every ``threshold`` qualifying events, an agent compacts what it has been through
into an ``agent.reflected`` event, which later recall picks up like any other event it may see.

Qualifying events are the agent's own plus those of the tenant's reflection kinds (world beats,
verdicts, user injections, run starts, reflections) it may see, not peer speech (SPEC 3.1). The
agent's own reflections do not count, so reflecting never makes another reflection due. A
reflection is due when ``qualifying // threshold`` exceeds the reflections the agent already
made in the run: checking twice, or from two workers at once, creates it once.

A reflection compacts the events its agent may see, its own private thoughts among them, so it
records the kinds it was made from and is private to its agent when any of them is private
(``ledger.selectors.event_visible_to`` reads that): peers see it only when everything it
compacts is visible to them anyway.

The default summariser is local and deterministic; ``REFLECTION_LLM_URL`` switches to an
OpenAI-compatible chat endpoint, with the local summary as the fallback when it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q

from config.http import ExternalServiceError, post_json
from config.sql import rows_named
from ledger.jobs import Batch, job_progress
from ledger.models import Agent, Event, RecallSettings
from ledger.selectors import (
    COVERS_KEY,
    DERIVED_FROM_KEY,
    event_derived_from,
    event_visible_to,
)
from ledger.services import event_append

logger = logging.getLogger(__name__)

REFLECTED = "agent.reflected"
_MAX_SOURCE_EVENTS = 50
_MAX_POINTS = 6
_MAX_POINT_CHARS = 160
_MAX_SUMMARY_CHARS = 900


@dataclass(frozen=True)
class ReflectionState:
    qualifying_events: int
    reflections_made: int
    threshold: int

    @property
    def due(self) -> bool:
        return self.qualifying_events // self.threshold > self.reflections_made


def reflection_state(*, agent: Agent, run_id: str) -> ReflectionState:
    settings_ = RecallSettings.for_tenant(agent.tenant)
    run_events = Event.objects.filter(tenant=agent.tenant, run_id=run_id)
    own_reflections = Q(actor=agent.name, kind=REFLECTED)
    qualifying = (
        run_events.filter(Q(actor=agent.name) | Q(kind__in=settings_.reflection_kinds))
        # A peer's private reflection is not the agent's to count: the count would betray it.
        .filter(event_visible_to(agent=agent, settings=settings_))
        .exclude(own_reflections)
        .count()
    )
    return ReflectionState(
        qualifying_events=qualifying,
        reflections_made=run_events.filter(own_reflections).count(),
        threshold=max(1, settings_.reflection_threshold),
    )


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    for end in (". ", "! ", "? "):
        cut = text.find(end)
        if 0 < cut < _MAX_POINT_CHARS:
            return text[: cut + 1]
    return text if len(text) <= _MAX_POINT_CHARS else text[: _MAX_POINT_CHARS - 1] + "…"


def summarise_locally(events: list[Event], importance: dict[str, float], default: float) -> str:
    """Keep the most important events (later ones win ties), in order, one sentence each."""
    with_text = [event for event in events if event.text]
    if not with_text:
        return "Nothing of note happened."
    ranked = sorted(with_text, key=lambda e: (importance.get(e.kind, default), e.seq), reverse=True)
    kept = sorted(ranked[:_MAX_POINTS], key=lambda e: e.seq)
    first, last = with_text[0].turn, with_text[-1].turn
    span = f"turn {first}" if first == last else f"turns {first}-{last}"
    points = "; ".join(f"{e.kind} ({e.actor}): {_first_sentence(e.text)}" for e in kept)
    summary = f"Over {span} ({len(with_text)} events): {points}"
    return summary[:_MAX_SUMMARY_CHARS]


def summarise_with_llm(events: list[Event], agent: Agent) -> str:
    lines = "\n".join(f"[turn {e.turn:03d}][{e.kind}] {e.text}" for e in events if e.text)
    answer = post_json(
        settings.REFLECTION_LLM_URL.rstrip("/") + "/chat/completions",
        {
            "model": settings.REFLECTION_LLM_MODEL,
            "temperature": 0,
            "messages": [
                {
                    "role": "system",
                    "content": "You compact an agent's recent experience into one short, "
                    "factual reflection (at most three sentences) that it will remember.",
                },
                {"role": "user", "content": f"Agent: {agent.name}\nRecent events:\n{lines}"},
            ],
        },
        api_key=settings.REFLECTION_LLM_API_KEY,
        timeout=settings.REFLECTION_LLM_TIMEOUT_SECONDS,
    )
    try:
        content = str(answer["choices"][0]["message"]["content"]).strip()
    except (KeyError, IndexError, TypeError) as exc:
        raise ExternalServiceError(f"unexpected chat completion shape: {exc}") from exc
    if not content:
        raise ExternalServiceError("the chat completion was empty")
    return content[:_MAX_SUMMARY_CHARS]


def reflection_create_if_due(*, agent: Agent, run_id: str, force: bool = False) -> Event | None:
    """Append the agent's reflection for the run if one is due (or ``force``); else None."""
    with transaction.atomic():
        # One reflection decision at a time per agent and run, across processes.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"agent-memory:reflection:{agent.pk}:{run_id}"],
            )
        if not force and not reflection_state(agent=agent, run_id=run_id).due:
            return None
        last = (
            Event.objects.filter(tenant=agent.tenant, run_id=run_id, actor=agent.name)
            .filter(kind=REFLECTED)
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        ) or 0
        recall_settings = RecallSettings.for_tenant(agent.tenant)
        recent = list(
            Event.objects.filter(tenant=agent.tenant, run_id=run_id, seq__gt=last)
            .filter(event_visible_to(agent=agent, settings=recall_settings))
            .order_by("-seq")[:_MAX_SOURCE_EVENTS]
        )[::-1]
        payload: dict[str, object] = {"summariser": "local"}
        summary = ""
        if settings.REFLECTION_LLM_URL:
            try:
                summary = summarise_with_llm(recent, agent)
                payload["summariser"] = "llm"
            except ExternalServiceError as exc:
                logger.warning("reflection LLM failed, using the local summariser: %s", exc)
                payload["llm_error"] = str(exc)
        if not summary:
            summary = summarise_locally(
                recent, recall_settings.kind_importance, recall_settings.default_importance
            )
        payload.update(
            {
                "summary": summary,
                # What makes the reflection private to its actor when any of them is private.
                DERIVED_FROM_KEY: event_derived_from(recent),
                COVERS_KEY: {
                    "from_seq": recent[0].seq if recent else None,
                    "to_seq": recent[-1].seq if recent else None,
                    "events": len(recent),
                },
            }
        )
        return event_append(
            tenant=agent.tenant,
            kind=REFLECTED,
            actor=agent.name,
            payload=payload,
            run_id=run_id,
            turn=recent[-1].turn if recent else 0,
        )


def reflections_create_due(*, after_event_id: int, up_to_event_id: int) -> int:
    """Create the reflections due in the runs that got events with ids in (after, up to].

    The periodic trigger (SPEC 9): a reflection can only become due when its run gets a new
    event, so only runs touched since the last check are looked at, and in them only the agents
    that have acted there (an agent that never spoke in a run has nothing to reflect on).
    ``reflection_create_if_due`` decides under its own lock, so checking a run twice, or from two
    workers, creates each reflection once. Returns how many it created.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tenant_id, run_id FROM ledger_event"
            " WHERE id > %s AND id <= %s AND run_id <> '' ORDER BY tenant_id, run_id",
            [after_event_id, up_to_event_id],
        )
        runs = [(int(row.tenant_id), str(row.run_id)) for row in rows_named(cursor)]
    created = 0
    for tenant_id, run_id in runs:
        actors = (
            Event.objects.filter(tenant_id=tenant_id, run_id=run_id)
            .values_list("actor", flat=True)
            .distinct()
        )
        agents = Agent.objects.filter(tenant_id=tenant_id, name__in=actors).select_related("tenant")
        for agent in agents.order_by("pk"):
            if reflection_create_if_due(agent=agent, run_id=run_id) is not None:
                created += 1
    return created


# Events looked at per reflection batch: the runs they touch are checked for due reflections.
REFLECTION_EVENT_SPAN = 5000
# Events before the last watermark looked at again: commits land slightly out of id order.
REFLECTION_OVERLAP = 200


def reflections_due_batches(*, job: str) -> Iterator[Batch]:
    """The reflection job's work: from the event id its last run reached (the watermark kept in
    ``job``'s runs) to the newest event, in spans of events.

    The first run ever starts at the newest event: reflections become due automatically from the
    moment the jobs run, not retroactively for every past run (which could mean many LLM calls).
    Later runs start ``REFLECTION_OVERLAP`` events before the watermark, because an event that
    commits after a later-numbered one can land below it; checking a run again creates nothing.
    """
    top = int(Event.objects.aggregate(top=Max("id"))["top"] or 0)
    progress = job_progress(job)
    start = (
        max(0, int(progress["after_event_id"]) - REFLECTION_OVERLAP)
        if "after_event_id" in progress
        else top
    )
    if start >= top:
        yield Batch(rows=0, more=False, details={"after_event_id": top})
        return
    while start < top:
        end = min(start + REFLECTION_EVENT_SPAN, top)
        created = reflections_create_due(after_event_id=start, up_to_event_id=end)
        start = end
        yield Batch(rows=created, more=start < top, details={"after_event_id": start})
