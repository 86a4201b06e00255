"""Demo trust data for ``manage.py up --demo``: rounds, dissents, overrides and their outcomes,
so every trust page has something real to show.

Written through the trust services (each change is its ledger event and moves the scores the way
real use would), at moments spread over the last three weeks so the charts have a history.
Idempotent like ledger.demo: a second call finds the first round and adds nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from ledger.models import Agent, Tenant
from ledger.services import SYSTEM_ACTOR
from trust.governance import services as governance
from trust.rounds import overrides, services
from trust.rounds.models import Round

RUN_ID = "demo-trust"
LEAD = "dana (team lead)"
REVIEWER = "admin"
CRITERIA = ["Accuracy", "Completeness", "Evidence", "Safety", "Clarity"]

_DEEP = (
    "The proposal assumes the nightly load fits in memory, but the orders table doubled in the "
    "last quarter and the join fans out per line item, so peak usage will exceed the limit. "
    "Measure the peak on last week's data before merging, and add a guard that fails fast."
)
_SHALLOW = "I disagree with this."
_DISSENTS: list[tuple[str, str, list[str], bool | None]] = [
    # (agent, text, citations, impact)
    ("Reviewer2", _DEEP, ["Evidence", "Accuracy"], True),
    (
        "Reviewer2",
        "Retries on payment webhooks are only safe when the receiver checks an "
        "idempotency key; a timing cap on the retry schedule is fragile.",
        ["Safety"],
        True,
    ),
    (
        "Reviewer2",
        "The summary drops the second root cause (the lowered memory limit) that the "
        "deploy log shows; the answer is incomplete without it.",
        ["Completeness"],
        True,
    ),
    (
        "Reviewer2",
        "The chart's axis is unlabeled, so a reader cannot tell seconds from minutes.",
        ["Clarity"],
        False,
    ),
    ("Creator1", _SHALLOW, [], False),
    ("Creator1", "Maybe the cache is wrong.", [], None),
    (
        "Curator1",
        "The filing misses the run id, so the incident cannot be traced back.",
        ["Completeness"],
        True,
    ),
]
# Reviewer1 cites one criterion over and over while its dissents land: the gaming check's case.
_NARROW = [
    f"Claim {n} in the draft is not supported by the source it cites; the figure there is "
    f"different and the draft should quote it exactly rather than paraphrase it loosely."
    for n in range(1, 13)
]


def _round(tenant: Tenant, number: int, moment: datetime, names: list[str]) -> Round:
    return services.rounds_post(
        tenant=tenant,
        round_id=f"{RUN_ID}/round_{number:02d}",
        run_id=RUN_ID,
        participants=names,
        actor="orchestrator",
        now=moment,
    )


def trust_demo_seed(tenant: Tenant) -> str:
    """Add the trust demo data once; returns what it added, or "" when it was there."""
    if Round.objects.filter(tenant=tenant, round_id=f"{RUN_ID}/round_01").exists():
        return ""
    agents = {a.name: a for a in Agent.objects.filter(tenant=tenant)}
    if not {"Creator1", "Reviewer1", "Reviewer2", "Curator1"} <= set(agents):
        return ""
    now = timezone.now()
    start = now - timedelta(days=21)

    def at(hours: float) -> datetime:
        return start + timedelta(hours=hours)

    with transaction.atomic():
        governance.rubric_version_create(
            tenant=tenant,
            criteria=[governance.CriterionDraft(name) for name in CRITERIA],
            actor=SYSTEM_ACTOR,
            note="Demo rubric",
            now=at(0),
        )
        # Curator1 joins only three rounds: it stays on probation.
        for number in range(1, 9):
            names = ["Creator1", "Reviewer1", "Reviewer2"]
            if number <= 3:
                names.append("Curator1")
            _round(tenant, number, at(number), names)
        hour = 10.0
        for name, text, citations, impact in _DISSENTS:
            hour += 7
            dissent = services.dissent_log(
                agent=agents[name],
                text=text,
                round_id=f"{RUN_ID}/round_{int(hour) % 8 + 1:02d}",
                rubric_citations=citations,
                actor=name,
                now=at(hour),
            )
            if impact is not None:
                services.dissent_set_impact(
                    dissent=dissent, impact=impact, actor="orchestrator", now=at(hour + 2)
                )
        for text in _NARROW:
            hour += 5
            dissent = services.dissent_log(
                agent=agents["Reviewer1"],
                text=text,
                rubric_citations=["Accuracy"],
                actor="Reviewer1",
                now=at(hour),
            )
            services.dissent_set_impact(
                dissent=dissent, impact=True, actor="orchestrator", now=at(hour + 1)
            )
        # The team lead's overrides of Reviewer1 all stood: a track record trusted enough to
        # propose a rubric change.
        kept = []
        for n in range(4):
            hour += 6
            kept.append(
                overrides.override_log(
                    agent=agents["Reviewer1"],
                    agent_output=f"Reject claim {n + 1}: unsupported.",
                    human_decision=f"Accept claim {n + 1}; the source supports it on page 2.",
                    decided_by=LEAD,
                    round_id=f"{RUN_ID}/round_0{n + 1}",
                    occurred_at=at(hour),
                    actor="orchestrator",
                    now=at(hour),
                )
            )
        flag = governance.gaming_check(agent=agents["Reviewer1"], now=at(hour + 1))
        # Creator1's overrides: two turn out regretted (inferred, and marked by a reviewer).
        for n, (output, decision) in enumerate(
            [
                ("Merge PR #482 as is.", "Hold PR #482 until the receiver is idempotent."),
                ("Close the incident.", "Keep the incident open until the limit is restored."),
                ("Ship the summary.", "Add the deploy-log evidence before shipping."),
            ]
        ):
            hour += 8
            overrides.override_log(
                agent=agents["Creator1"],
                agent_output=output,
                human_decision=decision,
                decided_by="sam (on call)",
                round_id=f"{RUN_ID}/round_0{n + 5}",
                occurred_at=at(hour),
                actor="orchestrator",
                now=at(hour),
            )
        # Round 5's final output went the agent's way after all: the override is regretted.
        round_five = Round.objects.get(tenant=tenant, round_id=f"{RUN_ID}/round_05")
        services.round_finalize(
            round=round_five, final_output="Merge PR #482 as is.", actor="orchestrator"
        )
        regretted = agents["Creator1"].overrides.filter(round_id=f"{RUN_ID}/round_06").get()
        overrides.override_revert(override=regretted, reverted_by=REVIEWER, actor=REVIEWER)
        # Waiting for their deadline: logged in the last hours.
        for name, output, decision in [
            ("Reviewer2", "Flag the migration as unsafe.", "Run the migration in two steps."),
            ("Creator1", "Use the cached figure.", "Recompute the figure from the raw export."),
            ("Curator1", "File under 'resolved'.", "File under 'needs follow-up'."),
        ]:
            overrides.override_log(
                agent=agents[name],
                agent_output=output,
                human_decision=decision,
                decided_by="sam (on call)",
                round_id=f"{RUN_ID}/round_08",
                occurred_at=now - timedelta(hours=3),
                actor="orchestrator",
            )
        governance.rubric_proposal_open(
            override=kept[0],
            action="add",
            criterion="Source quoting",
            description="Numbers taken from a source are quoted exactly, with the page.",
            rationale="Reviewer1's accuracy dissents were about paraphrased figures.",
            actor=LEAD,
        )
    note = "8 rounds, 19 dissents, 10 overrides (2 regretted, 3 waiting), a rubric proposal"
    return note + (", a gaming flag" if flag is not None else "")
