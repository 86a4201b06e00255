"""What trust scores drive: Devil's Advocate selection, gaming flags, the living rubric, metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from config.api import ApiError
from ledger.models import Agent, Tenant
from ledger.services import event_append, tenant_write_lock
from trust.models import RubricCriterion, RubricProposal, RubricVersion


@dataclass(frozen=True)
class CriterionDraft:
    name: str
    description: str = ""


def rubric_version_create(
    *,
    tenant: Tenant,
    criteria: Sequence[CriterionDraft],
    actor: str,
    note: str = "",
    proposal: RubricProposal | None = None,
    now: datetime | None = None,
) -> RubricVersion:
    """Make a new current rubric version holding exactly ``criteria``."""
    names = [c.name.strip() for c in criteria]
    if not names or any(not name for name in names):
        raise ApiError(
            code="invalid_rubric", message="A rubric needs at least one named criterion."
        )
    if len({name.casefold() for name in names}) != len(names):
        raise ApiError(code="invalid_rubric", message="Criterion names must be unique.")
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(tenant)
        latest = RubricVersion.objects.filter(tenant=tenant).order_by("-number").first()
        version = RubricVersion.objects.create(
            tenant=tenant,
            number=(latest.number if latest else 0) + 1,
            created_at=moment,
            created_by=actor,
            note=note,
            proposal=proposal,
        )
        RubricCriterion.objects.bulk_create(
            [
                RubricCriterion(
                    tenant=tenant, version=version, name=name, description=c.description
                )
                for name, c in zip(names, criteria, strict=True)
            ]
        )
        event_append(
            tenant=tenant,
            kind="rubric.version_created",
            actor=actor,
            payload={
                "version_id": version.pk,
                "version": version.number,
                "criteria": [
                    {"name": name, "description": c.description}
                    for name, c in zip(names, criteria, strict=True)
                ],
                "note": note,
                "proposal_id": proposal.pk if proposal else None,
                "at": moment.isoformat(),
            },
        )
    return version


def gaming_check(*, agent: Agent, now: datetime | None = None) -> None:
    """Flag the agent for review when its recent citations narrowed while its trust is high.

    Called by trust.services after every dissent, inside its transaction.
    """
    return None
