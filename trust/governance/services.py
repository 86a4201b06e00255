"""Writes of governance, what trust scores drive: the Devil's Advocate pick, gaming flags and
their review, rubric versions and the proposals that change them.

Writers here follow trust.rounds.services: the tenant's ledger lock first, then the rows, then the
event that records them, all in one transaction, so the governance tables can be rebuilt from the
ledger (trust.governance.projection)."""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from rest_framework import status

from config.api import ApiError, Conflict
from ledger.models import Agent, Tenant
from ledger.services import event_append, tenant_write_lock
from trust.governance.models import GamingFlag, RubricCriterion, RubricProposal, RubricVersion
from trust.governance.selectors import decision_maker_trust, rubric_current
from trust.rounds.models import Dissent, Override
from trust.rounds.selectors import agents_named
from trust.scores.scoring import citation_entropy
from trust.scores.selectors import agent_on_probation

DEVILS_ADVOCATE_PICKED = "trust.devils_advocate_picked"


MAX_SEED = 2**63 - 1  # what PostgreSQL's bigint and every JSON client can carry exactly


GAMING_WINDOW = 20  # the agent's last 20 dissents...


GAMING_MIN_DISSENTS = 10  # ...of which at least 10 must exist before entropy means anything


# --- Devil's Advocate --------------------------------------------------------------------------


@dataclass(frozen=True)
class DevilsAdvocatePick:
    picked: Agent
    candidates: list[str]
    eligible: list[str]
    weights: list[float]  # weights[i] is eligible[i]'s trust score
    seed: int
    fallback: bool
    event_seq: int


def _valid_seed(seed: object) -> int:
    # bool is an int to Python, and a float seed would be hashed rather than used: refuse both,
    # so that a seed reported in the ledger always replays the same pick.
    if seed is None:
        return secrets.randbelow(MAX_SEED + 1)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ApiError(
            code="invalid_seed",
            message=f"seed must be an integer from 0 to {MAX_SEED}, or omitted.",
            details={"seed": repr(seed)},
        )
    return seed


def devils_advocate_choose(names: Sequence[str], weights: Sequence[float], seed: int) -> str:
    """The weighted draw itself, a pure function of its inputs so any logged pick can be replayed.

    All-zero weights (every eligible agent at trust 0) make ``random.choices`` raise; the draw is
    uniform then, as no candidate is more trusted than another.
    """
    chooser = random.Random(seed)  # noqa: S311 (a fair, reproducible draw, not a secret)
    if not any(weight > 0 for weight in weights):
        return chooser.choice(list(names))
    return chooser.choices(list(names), weights=list(weights), k=1)[0]


def devils_advocate_pick(
    *,
    tenant: Tenant,
    candidates: Sequence[str],
    seed: object | None,
    actor: str,
    now: datetime | None = None,
) -> DevilsAdvocatePick:
    """Pick the Devil's Advocate among ``candidates`` (agent names), weighted by trust.

    Eligible: trust above DEVILS_ADVOCATE_MIN_TRUST and out of probation; when nobody is, all
    candidates are (``fallback``). Without a seed one is drawn and reported, so every pick can be
    reproduced from the ledger.
    """
    names = list(candidates)
    if not names:
        raise ApiError(code="no_candidates", message="Name at least one candidate agent.")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ApiError(
            code="duplicate_candidate",
            message=f"Candidates must be named once each; repeated: {', '.join(repeated)}.",
            details={"duplicates": repeated},
        )
    used_seed = _valid_seed(seed)
    moment = now or timezone.now()
    agents = agents_named(tenant=tenant, names=names)
    eligible = [
        name
        for name in names
        if agents[name].trust_score > settings.DEVILS_ADVOCATE_MIN_TRUST
        and not agent_on_probation(agent=agents[name], now=moment)
    ]
    fallback = not eligible
    if fallback:
        eligible = names
    weights = [agents[name].trust_score for name in eligible]
    picked = devils_advocate_choose(eligible, weights, used_seed)
    event = event_append(
        tenant=tenant,
        kind=DEVILS_ADVOCATE_PICKED,
        actor=actor,
        payload={
            "candidates": names,
            "eligible": eligible,
            "weights": weights,
            "seed": used_seed,
            "picked": picked,
            "picked_id": agents[picked].pk,
            "fallback": fallback,
            "at": moment.isoformat(),
        },
    )
    return DevilsAdvocatePick(
        picked=agents[picked],
        candidates=names,
        eligible=eligible,
        weights=weights,
        seed=used_seed,
        fallback=fallback,
        event_seq=event.seq,
    )


# --- Gaming flags ------------------------------------------------------------------------------


def gaming_check(*, agent: Agent, now: datetime | None = None) -> GamingFlag | None:
    """Flag the agent for review when its recent citations narrowed while its trust is high.

    Called by trust.rounds.services after every dissent, inside its transaction. Returns the new
    flag, or None (too few dissents, diverse enough, trust too low, or a flag already waits).
    """
    moment = now or timezone.now()
    # Inside a caller's transaction no savepoint: a failure here fails the caller anyway.
    with transaction.atomic(savepoint=False):
        tenant_write_lock(agent.tenant)
        # Cheapest test first: most agents are not trusted enough for a flag to matter.
        trust = Agent.objects.filter(pk=agent.pk).values_list("trust_score", flat=True).get()
        if trust < settings.GAMING_MIN_TRUST:
            return None
        if GamingFlag.objects.filter(agent=agent, status=GamingFlag.Status.OPEN).exists():
            return None
        # The tenant too, so the (tenant, agent, -occurred_at) index serves the newest first.
        dissents = Dissent.objects.filter(
            tenant_id=agent.tenant_id, agent=agent, occurred_at__lte=moment
        )
        # A review settled the evidence it saw: flagging again needs dissents logged after it,
        # or a dismissed flag would reopen on the next dissent.
        reviewed = GamingFlag.objects.filter(agent=agent).aggregate(last=Max("reviewed_at"))
        if reviewed["last"] is not None:
            dissents = dissents.filter(created_at__gt=reviewed["last"])
        recent = list(
            dissents.order_by("-occurred_at", "-id").values_list("rubric_citations", flat=True)[
                :GAMING_WINDOW
            ]
        )
        if len(recent) < GAMING_MIN_DISSENTS:
            return None
        entropy, counts = citation_entropy(recent)
        # No citations at all is not a narrowed choice of criteria: there is nothing to game.
        if not counts or entropy >= settings.GAMING_ENTROPY_THRESHOLD_BITS:
            return None
        flag = GamingFlag.objects.create(
            tenant=agent.tenant,
            agent=agent,
            created_at=moment,
            entropy_bits=entropy,
            trust_score=trust,
            dissents_considered=len(recent),
            citation_counts=counts,
        )
        event_append(
            tenant=agent.tenant,
            kind="gaming.flagged",
            actor="system",
            payload={
                "flag_id": flag.pk,
                "agent_id": agent.pk,
                "agent": agent.name,
                "entropy_bits": entropy,
                "threshold_bits": settings.GAMING_ENTROPY_THRESHOLD_BITS,
                "trust_score": trust,
                "dissents_considered": len(recent),
                "citation_counts": counts,
                "at": moment.isoformat(),
            },
        )
    return flag


def gaming_flag_review(
    *, flag: GamingFlag, status: str, note: str, actor: str, now: datetime | None = None
) -> GamingFlag:
    """A person's verdict on an open flag: ``dismissed`` or ``confirmed``. Reviewed once."""
    if status not in (GamingFlag.Status.DISMISSED, GamingFlag.Status.CONFIRMED):
        raise ApiError(
            code="invalid_review", message="A review's status is 'dismissed' or 'confirmed'."
        )
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(flag.tenant)
        current: GamingFlag = GamingFlag.objects.select_for_update().get(pk=flag.pk)
        if current.status != GamingFlag.Status.OPEN:
            raise Conflict(
                code="flag_already_reviewed",
                message=f"This flag was already reviewed ({current.status}).",
                details={"status": current.status, "reviewed_by": current.reviewed_by},
            )
        current.status = status
        current.reviewed_by = actor
        current.reviewed_at = moment
        current.review_note = note
        current.save(update_fields=["status", "reviewed_by", "reviewed_at", "review_note"])
        event_append(
            tenant=flag.tenant,
            kind="gaming.flag_reviewed",
            actor=actor,
            payload={
                "flag_id": current.pk,
                "agent_id": current.agent_id,
                "status": status,
                "note": note,
                "at": moment.isoformat(),
            },
        )
    return current


# --- The living rubric -------------------------------------------------------------------------


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
        rows = RubricCriterion.objects.bulk_create(
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
                    {"id": row.pk, "name": row.name, "description": row.description} for row in rows
                ],
                "note": note,
                "proposal_id": proposal.pk if proposal else None,
                "at": moment.isoformat(),
            },
        )
    return version


def _rubric_changed(
    *, current: RubricVersion | None, action: str, criterion: str, description: str
) -> tuple[list[CriterionDraft], str]:
    """The current rubric's criteria with one change applied, and the criterion's spelling.

    Names match without regard to case, as citations do; a change or removal keeps the rubric's
    own spelling.
    """
    criteria = [
        CriterionDraft(name=c.name, description=c.description)
        for c in (current.criteria.all() if current else [])
    ]
    wanted = criterion.strip()
    existing = next((c for c in criteria if c.name.casefold() == wanted.casefold()), None)
    version = current.number if current else 0

    def refuse(message: str) -> ApiError:
        return ApiError(
            code="invalid_rubric_change",
            message=message,
            details={"version": version, "criteria": [c.name for c in criteria]},
        )

    if not wanted:
        raise refuse("Name the criterion to add, change or remove.")
    if action == RubricProposal.Action.ADD:
        if existing is not None:
            raise refuse(f"Rubric v{version} already has a criterion '{existing.name}'.")
        return [*criteria, CriterionDraft(name=wanted, description=description)], wanted
    if action not in (RubricProposal.Action.CHANGE, RubricProposal.Action.REMOVE):
        raise refuse("The action is 'add', 'change' or 'remove'.")
    if existing is None:
        raise refuse(f"Rubric v{version} has no criterion '{wanted}'.")
    if action == RubricProposal.Action.REMOVE:
        if len(criteria) == 1:
            raise refuse("A rubric keeps at least one criterion; add another before removing it.")
        return [c for c in criteria if c is not existing], existing.name
    changed = CriterionDraft(name=existing.name, description=description)
    return [changed if c is existing else c for c in criteria], existing.name


def _proposal_payload(proposal: RubricProposal) -> dict[str, Any]:
    return {
        "proposal_id": proposal.pk,
        "override_id": proposal.override_id,
        "proposed_by": proposal.proposed_by,
        "proposer_trust": proposal.proposer_trust,
        "action": proposal.action,
        "criterion": proposal.criterion,
        "description": proposal.description,
        "rationale": proposal.rationale,
        "base_version": proposal.base_version,
        "at": proposal.created_at.isoformat(),
    }


def rubric_proposal_open(
    *,
    override: Override,
    action: str,
    criterion: str,
    description: str,
    rationale: str,
    actor: str,
    now: datetime | None = None,
) -> RubricProposal:
    """Open a rubric change from an override, in the name of the override's decision maker.

    Only a decision maker trusted at RUBRIC_PROPOSAL_MIN_TRUST or more may (403
    ``decision_maker_not_trusted`` otherwise); the change must apply to the current rubric.
    """
    tenant = override.tenant
    if not override.decided_by:
        raise ApiError(
            code="no_decision_maker",
            message="This override names no decision maker (decided_by), so nobody can propose.",
        )
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(tenant)
        maker = decision_maker_trust(tenant=tenant, name=override.decided_by)
        threshold = settings.RUBRIC_PROPOSAL_MIN_TRUST
        if maker.trust < threshold:
            raise ApiError(
                code="decision_maker_not_trusted",
                message=(
                    f"{maker.name} has trust {maker.trust:.3f}; a rubric change needs at least "
                    f"{threshold}."
                ),
                status_code=status.HTTP_403_FORBIDDEN,
                details={"trust": maker.trust, "threshold": threshold, "source": maker.source},
            )
        current = rubric_current(tenant=tenant)
        _, spelled = _rubric_changed(
            current=current, action=action, criterion=criterion, description=description
        )
        proposal = RubricProposal.objects.create(
            tenant=tenant,
            override=override,
            proposed_by=maker.name,
            proposer_trust=maker.trust,
            created_at=moment,
            action=action,
            criterion=spelled,
            description=description,
            rationale=rationale,
            base_version=current.number if current else 0,
        )
        event_append(
            tenant=tenant,
            kind="rubric.change_proposed",
            actor=actor,
            payload=_proposal_payload(proposal),
        )
    return proposal


def rubric_proposal_decide(
    *,
    proposal: RubricProposal,
    accept: bool,
    note: str,
    actor: str,
    now: datetime | None = None,
) -> RubricProposal:
    """An admin's decision on a pending proposal; accepting makes a new rubric version.

    The change is applied to the rubric as it is now, which may be newer than the one it was
    proposed against; if it no longer applies (the criterion was added or removed since), the
    decision is refused and the proposal stays pending.
    """
    tenant = proposal.tenant
    moment = now or timezone.now()
    with transaction.atomic():
        tenant_write_lock(tenant)
        current_proposal: RubricProposal = RubricProposal.objects.select_for_update().get(
            pk=proposal.pk
        )
        if current_proposal.status != RubricProposal.Status.PENDING:
            raise Conflict(
                code="proposal_already_decided",
                message=f"This proposal was already {current_proposal.status}.",
                details={
                    "status": current_proposal.status,
                    "decided_by": current_proposal.decided_by,
                },
            )
        result_version: int | None = None
        if accept:
            criteria, _ = _rubric_changed(
                current=rubric_current(tenant=tenant),
                action=current_proposal.action,
                criterion=current_proposal.criterion,
                description=current_proposal.description,
            )
            version = rubric_version_create(
                tenant=tenant,
                criteria=criteria,
                actor=actor,
                note=note or f"Proposal {current_proposal.pk}: {current_proposal.rationale}",
                proposal=current_proposal,
                now=moment,
            )
            result_version = version.number
        current_proposal.status = (
            RubricProposal.Status.ACCEPTED if accept else RubricProposal.Status.REJECTED
        )
        current_proposal.decided_by = actor
        current_proposal.decided_at = moment
        current_proposal.decision_note = note
        current_proposal.result_version = result_version
        current_proposal.save(
            update_fields=["status", "decided_by", "decided_at", "decision_note", "result_version"]
        )
        event_append(
            tenant=tenant,
            kind="rubric.proposal_decided",
            actor=actor,
            payload={
                "proposal_id": current_proposal.pk,
                "status": current_proposal.status,
                "note": note,
                "result_version": result_version,
                "at": moment.isoformat(),
            },
        )
    return current_proposal
