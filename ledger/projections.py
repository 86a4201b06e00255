"""Projections: tables derived from the ledger, and the registry that can rebuild them.

The ledger is the source of truth. Every table that other apps derive from it registers a
projection here (in its AppConfig.ready), saying which event kinds it owns and how to replay them.
``python manage.py rebuild_projections`` replays each tenant's events, in seq order, into every
projection and reports whether the result equals what was there.

Kinds owned by a projection are written only by the service that also writes the projected row;
clients cannot append them through the API, or a replay would conjure rows no service made.

A projection may also be *derived data* (a search index over event text). Those declare
``indexes_all_kinds`` and receive every appended event after commit via ``after_append``.

Deleting an agent concerns every projection: ``ledger.services.agent_delete`` removes every row
of the agent in every app and logs one ``agent.deleted``, and a rebuild replays that event into
every projection, whatever kinds it owns, to remove there whatever of the agent came before it.
What a deletion must do beyond the foreign keys' cascade (destroying the keys of the agent's
sealed memories, which nothing links to the agent) the later apps register as agent deletion
steps here, since the ledger may not import them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from ledger.models import Agent, Event, Tenant

logger = logging.getLogger(__name__)

_REPLAY_BATCH = 2000
AGENT_DELETED = "agent.deleted"


class Projection(Protocol):
    name: str
    owned_kinds: frozenset[str]
    indexes_all_kinds: bool

    def snapshot(self, *, tenant: Tenant) -> Any:
        """A comparable picture of the projected rows, to check a rebuild changed nothing."""

    def reset(self, *, tenant: Tenant) -> None:
        """Prepare to replay the tenant's events from the start."""

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        """Replay events (in seq order) into the projection: the kinds it owns, and
        ``agent.deleted``, whose replay removes every row of that agent the projection holds."""

    def finish(self, *, tenant: Tenant) -> None:
        """Called after the last batch: write whatever the replay accumulated."""

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        """Called after commit for newly appended events (derived indexes only)."""


class AgentDeletionStep(Protocol):
    def __call__(self, *, agent: Agent) -> dict[str, int]:
        """Remove what of the agent its deletion's cascade would leave; rows removed by model
        label, for the ``agent.deleted`` event."""


_registry: dict[str, Projection] = {}
_agent_deletion_steps: list[AgentDeletionStep] = []
# Kinds the service writes that no projection replays (tenant.created, api_key.revoked, ...).
_service_kinds: set[str] = set()


def service_kinds_register(*kinds: str) -> None:
    _service_kinds.update(kinds)


def projection_register(projection: Projection) -> None:
    _registry[projection.name] = projection


def registered_projections() -> list[Projection]:
    return list(_registry.values())


def agent_deletion_step_register(step: AgentDeletionStep) -> None:
    if step not in _agent_deletion_steps:
        _agent_deletion_steps.append(step)


def agent_deletion_steps() -> list[AgentDeletionStep]:
    return list(_agent_deletion_steps)


def reserved_kinds() -> frozenset[str]:
    """Event kinds that only the service layer may append."""
    kinds: set[str] = set(_service_kinds)
    for projection in _registry.values():
        kinds |= projection.owned_kinds
    return frozenset(kinds)


def _events_in_order(tenant: Tenant, kinds: frozenset[str] | None) -> Iterator[list[Event]]:
    after = 0
    while True:
        queryset = Event.objects.filter(tenant=tenant, seq__gt=after)
        if kinds is not None:
            queryset = queryset.filter(kind__in=kinds)
        batch = list(queryset.order_by("seq")[:_REPLAY_BATCH])
        if not batch:
            return
        yield batch
        after = batch[-1].seq


def projection_rebuild(*, projection: Projection, tenant: Tenant) -> bool:
    """Replay the tenant's ledger into one projection. Returns True if nothing changed."""
    before = projection.snapshot(tenant=tenant)
    projection.reset(tenant=tenant)
    kinds = None if projection.indexes_all_kinds else projection.owned_kinds | {AGENT_DELETED}
    for batch in _events_in_order(tenant, kinds):
        projection.apply(tenant=tenant, events=batch)
    projection.finish(tenant=tenant)
    return bool(projection.snapshot(tenant=tenant) == before)


def projections_after_append(*, event_ids: Iterable[int]) -> None:
    """Hand new events to the derived indexes. Runs after commit, so it must never raise: the
    events are already safe, and the backfill job catches up whatever an index missed here."""
    ids = list(event_ids)
    for projection in _registry.values():
        if projection.indexes_all_kinds:
            try:
                projection.after_append(event_ids=ids)
            except Exception:
                logger.exception("%s could not schedule indexing; backfill will", projection.name)
