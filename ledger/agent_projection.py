"""The agents table as a projection of ``agent.registered`` / ``agent.updated`` /
``agent.deleted`` events.

Replaying accumulates each agent's fields in memory (a tenant has at most thousands of agents)
and writes the differences at the end, so a history of renames never collides with the unique
name constraint half-way through. Trust fields (``trust_score``, ``rounds_participated``) belong to
the trust app's projection and are left alone here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ledger.models import Agent, Event, Tenant
from ledger.names import agent_name_key
from ledger.projections import AGENT_DELETED


def _parsed(value: str | None) -> datetime | None:
    return None if value is None else parse_datetime(value)


_FIELDS = ("name", "model", "primary_role", "probation_until")


class AgentProjection:
    name = "agents"
    owned_kinds = frozenset({"agent.registered", "agent.updated", AGENT_DELETED})
    indexes_all_kinds = False

    def __init__(self) -> None:
        self._replayed: dict[int, dict[str, Any]] = {}

    def snapshot(self, *, tenant: Tenant) -> list[tuple[Any, ...]]:
        return list(Agent.objects.filter(tenant=tenant).order_by("id").values_list("id", *_FIELDS))

    def reset(self, *, tenant: Tenant) -> None:
        self._replayed = {}

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        for event in events:
            agent_id = int(event.payload["agent_id"])
            if event.kind == "agent.registered":
                self._replayed[agent_id] = {
                    "name": event.payload["name"],
                    "model": event.payload.get("model", ""),
                    "primary_role": event.payload.get("primary_role", ""),
                    "probation_until": _parsed(event.payload.get("probation_until")),
                    "created_at": event.created_at,
                }
            elif event.kind == "agent.updated" and agent_id in self._replayed:
                for field, value in event.payload["changes"].items():
                    if field == "probation_until":
                        value = _parsed(value)
                    self._replayed[agent_id][field] = value
            elif event.kind == AGENT_DELETED:
                self._replayed.pop(agent_id, None)

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        """The agents table is written by the agent services themselves, not after the fact."""

    def finish(self, *, tenant: Tenant) -> None:
        with transaction.atomic():
            existing = {agent.pk: agent for agent in Agent.objects.filter(tenant=tenant)}
            Agent.objects.filter(tenant=tenant).exclude(pk__in=self._replayed).delete()
            changed = []
            for agent_id, fields in self._replayed.items():
                agent = existing.get(agent_id)
                if agent is None:
                    Agent.objects.create(id=agent_id, tenant=tenant, **fields)
                    continue
                if any(getattr(agent, field) != fields[field] for field in _FIELDS):
                    for field in _FIELDS:
                        setattr(agent, field, fields[field])
                    changed.append(agent)
            # Park changed names first, so swapping two agents' names cannot collide. A parked
            # key holds a colon, which no valid name's key does (ledger.names), so it is free.
            for agent in changed:
                parked = f"rebuild:{agent.pk}"
                Agent.objects.filter(pk=agent.pk).update(name=parked, name_key=parked)
                agent.name_key = agent_name_key(agent.name)
            Agent.objects.bulk_update(changed, [*_FIELDS, "name_key"])
        self._replayed = {}
