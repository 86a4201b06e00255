"""Gaming flags, rubric versions (with their criteria) and rubric proposals as a projection of
the ``gaming.*`` and ``rubric.*`` events, registered in ``TrustConfig.ready`` after the core's
trust projection.

It comes after the core because proposals point at overrides: a full rebuild recreates the
overrides first, and this one links the proposals to them. Rows are recreated with the ids their
events carry, so links from elsewhere (and the proposals' override ids) stay valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.utils.dateparse import parse_datetime

from ledger.models import Agent, Event, Tenant
from ledger.services import tenant_write_lock
from trust.governance.models import GamingFlag, RubricCriterion, RubricProposal, RubricVersion
from trust.rounds.models import Override

GAMING_EVENT_KINDS = frozenset({"gaming.flagged", "gaming.flag_reviewed"})
RUBRIC_EVENT_KINDS = frozenset(
    {"rubric.version_created", "rubric.change_proposed", "rubric.proposal_decided"}
)

_FLAG_FIELDS = (
    "id",
    "agent_id",
    "created_at",
    "entropy_bits",
    "trust_score",
    "dissents_considered",
    "citation_counts",
    "status",
    "reviewed_by",
    "reviewed_at",
    "review_note",
)
_VERSION_FIELDS = ("id", "number", "created_at", "created_by", "note", "proposal_id")
_CRITERION_FIELDS = ("id", "version_id", "name", "description")
_PROPOSAL_FIELDS = (
    "id",
    "override_id",
    "proposed_by",
    "proposer_trust",
    "created_at",
    "action",
    "criterion",
    "description",
    "rationale",
    "base_version",
    "status",
    "decided_by",
    "decided_at",
    "decision_note",
    "result_version",
)


def _sequences_past_ids() -> None:
    """Rows came back with the ids of their events; a fresh database's sequences (a rebuild
    into an empty schema) must move past them, or the next insert collides."""
    with connection.cursor() as cursor:
        for model in (GamingFlag, RubricVersion, RubricCriterion, RubricProposal):
            table = model._meta.db_table
            sequence = f"pg_get_serial_sequence('{table}', 'id')"
            cursor.execute(
                f"SELECT setval({sequence}, greatest(max(id), nextval({sequence})))"  # noqa: S608
                f" FROM {table} HAVING max(id) IS NOT NULL"
            )


def _at(payload: dict[str, Any]) -> Any:
    return parse_datetime(payload["at"])


class GovernanceProjection:
    name = "trust_governance"
    owned_kinds = GAMING_EVENT_KINDS | RUBRIC_EVENT_KINDS
    indexes_all_kinds = False

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._flags: dict[int, dict[str, Any]] = {}
        self._versions: dict[int, dict[str, Any]] = {}
        self._criteria: list[dict[str, Any]] = []
        self._proposals: dict[int, dict[str, Any]] = {}

    def snapshot(self, *, tenant: Tenant) -> tuple[list[tuple[Any, ...]], ...]:
        return (
            list(
                GamingFlag.objects.filter(tenant=tenant).order_by("id").values_list(*_FLAG_FIELDS)
            ),
            list(
                RubricVersion.objects.filter(tenant=tenant)
                .order_by("id")
                .values_list(*_VERSION_FIELDS)
            ),
            list(
                RubricCriterion.objects.filter(tenant=tenant)
                .order_by("id")
                .values_list(*_CRITERION_FIELDS)
            ),
            list(
                RubricProposal.objects.filter(tenant=tenant)
                .order_by("id")
                .values_list(*_PROPOSAL_FIELDS)
            ),
        )

    def reset(self, *, tenant: Tenant) -> None:
        self._clear()

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        for event in events:
            payload = event.payload
            if event.kind == "gaming.flagged":
                self._flags[int(payload["flag_id"])] = {
                    "agent_id": int(payload["agent_id"]),
                    "created_at": _at(payload),
                    "entropy_bits": payload["entropy_bits"],
                    "trust_score": payload["trust_score"],
                    "dissents_considered": payload["dissents_considered"],
                    "citation_counts": payload["citation_counts"],
                    "status": GamingFlag.Status.OPEN,
                    "reviewed_by": "",
                    "reviewed_at": None,
                    "review_note": "",
                }
            elif event.kind == "gaming.flag_reviewed":
                flag = self._flags.get(int(payload["flag_id"]))
                if flag is not None:
                    flag.update(
                        status=payload["status"],
                        reviewed_by=event.actor,
                        reviewed_at=_at(payload),
                        review_note=payload["note"],
                    )
            elif event.kind == "rubric.version_created":
                self._apply_version(event)
            elif event.kind == "rubric.change_proposed":
                self._proposals[int(payload["proposal_id"])] = {
                    "override_id": payload["override_id"],
                    "proposed_by": payload["proposed_by"],
                    "proposer_trust": payload["proposer_trust"],
                    "created_at": _at(payload),
                    "action": payload["action"],
                    "criterion": payload["criterion"],
                    "description": payload["description"],
                    "rationale": payload["rationale"],
                    "base_version": payload["base_version"],
                    "status": RubricProposal.Status.PENDING,
                    "decided_by": "",
                    "decided_at": None,
                    "decision_note": "",
                    "result_version": None,
                }
            elif event.kind == "rubric.proposal_decided":
                proposal = self._proposals.get(int(payload["proposal_id"]))
                if proposal is not None:
                    proposal.update(
                        status=payload["status"],
                        decided_by=event.actor,
                        decided_at=_at(payload),
                        decision_note=payload["note"],
                        result_version=payload["result_version"],
                    )

    def _apply_version(self, event: Event) -> None:
        payload = event.payload
        version_id = int(payload["version_id"])
        self._versions[version_id] = {
            "number": payload["version"],
            "created_at": _at(payload),
            "created_by": event.actor,
            "note": payload.get("note", ""),
            "proposal_id": payload.get("proposal_id"),
        }
        for criterion in payload["criteria"]:
            self._criteria.append(
                {
                    "id": criterion.get("id"),
                    "version_id": version_id,
                    "name": criterion["name"],
                    "description": criterion.get("description", ""),
                }
            )

    def finish(self, *, tenant: Tenant) -> None:
        with transaction.atomic():
            tenant_write_lock(tenant)
            # Rows whose agent or override is gone went with it (cascade) or lost the link
            # (set null) in the live tables; the replay does the same.
            agents = set(Agent.objects.filter(tenant=tenant).values_list("id", flat=True))
            overrides = set(
                Override.objects.filter(
                    tenant=tenant,
                    pk__in=[p["override_id"] for p in self._proposals.values()],
                ).values_list("id", flat=True)
            )
            RubricVersion.objects.filter(tenant=tenant).delete()  # and their criteria
            RubricProposal.objects.filter(tenant=tenant).delete()
            GamingFlag.objects.filter(tenant=tenant).delete()
            GamingFlag.objects.bulk_create(
                GamingFlag(id=flag_id, tenant=tenant, **fields)
                for flag_id, fields in self._flags.items()
                if fields["agent_id"] in agents
            )
            RubricProposal.objects.bulk_create(
                RubricProposal(
                    id=proposal_id,
                    tenant=tenant,
                    **{
                        **fields,
                        "override_id": fields["override_id"]
                        if fields["override_id"] in overrides
                        else None,
                    },
                )
                for proposal_id, fields in self._proposals.items()
            )
            RubricVersion.objects.bulk_create(
                RubricVersion(id=version_id, tenant=tenant, **fields)
                for version_id, fields in self._versions.items()
            )
            RubricCriterion.objects.bulk_create(
                RubricCriterion(tenant=tenant, **fields) for fields in self._criteria
            )
            _sequences_past_ids()
        self._clear()

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        """The governance rows are written by their services, not after the fact."""
