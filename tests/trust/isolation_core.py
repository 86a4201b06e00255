"""Trust endpoints in the isolation matrix (tests/ledger/test_isolation.py): the entries, the
objects of the victim tenant they target, and the rows that must not change."""

from __future__ import annotations

from typing import Any

from ledger.models import Agent, Tenant
from tests.endpoints import Endpoint

TRUST_CORE_ENDPOINTS: list[Endpoint] = []


def trust_core_victims(*, tenant: Tenant, agent: Agent) -> dict[str, int]:
    """Ids of the victim's trust objects, by the ``target`` names the entries use."""
    return {}


def trust_core_snapshot() -> list[Any]:
    return []
