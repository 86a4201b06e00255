"""A multi-agent review loop played against a running Agent Memory service with the Python client.

    AGENT_MEMORY_URL=http://127.0.0.1:8000 AGENT_MEMORY_API_KEY=<admin key> \\
        .venv/bin/python examples/review_loop.py --rounds 3

It registers two creators and three reviewers (each with its own agent-scoped key), makes sure
the tenant has a review rubric, and plays rounds: the creators produce drafts (kept in the
content store), a Devil's Advocate is picked among the reviewers by trust, the reviewers dissent
citing rubric criteria, a person overrides a draft and marks which dissents changed the outcome,
and the round is finalised with the human's version. Afterwards the first round's override is
undone by a newer version that restores the creator's draft (the override is reverted, as
regretted), and it prints the trust table and the metrics.

Every name gets a suffix of this run (``--tag``), so the script can run again on the same tenant.
"""

from __future__ import annotations

import argparse
import uuid
from dataclasses import dataclass

from ledgered_memory import Client, NotFoundError, types

CRITERIA: list[types.RubricCriterionRequest] = [
    {"name": "correctness", "description": "The output does what the task asks, without errors."},
    {"name": "security", "description": "No secrets, injection or unsafe defaults."},
    {"name": "clarity", "description": "A reader can follow and maintain it."},
    {"name": "tests", "description": "The change comes with tests that would catch a regression."},
]

# What each reviewer tends to look at: its dissents cite these criteria.
REVIEWER_FOCUS = {
    "Reviewer-Sec": ["security", "correctness"],
    "Reviewer-QA": ["tests", "correctness"],
    "Reviewer-Style": ["clarity"],
}
TASKS = [
    "Write the webhook receiver for payment events.",
    "Add a retry policy to the invoice exporter.",
    "Cache the currency rates for the checkout page.",
    "Rotate the API keys of the billing service.",
]


@dataclass
class Agent:
    name: str
    client: Client  # authenticated with this agent's own, agent-scoped key


@dataclass
class RoundOutcome:
    round: types.Round
    creator: Agent
    draft: str
    override: types.Override
    devils_advocate: types.DevilsAdvocatePick


def register(admin: Client, base_url: str, name: str, role: str) -> Agent:
    admin.agents_create(name=name, primary_role=role)
    key = admin.api_keys_create(name=f"{name} key", role="agent", agent=name)["key"]
    return Agent(name=name, client=Client(base_url=base_url, api_key=key))


def ensure_rubric(admin: Client) -> list[str]:
    try:
        names = [criterion["name"] for criterion in admin.rubric_get()["criteria"]]
    except NotFoundError:  # no_rubric: a new tenant
        names = []
    if not {c["name"] for c in CRITERIA} <= set(names):
        names = [
            c["name"]
            for c in admin.rubric_create(criteria=CRITERIA, note="review loop")["criteria"]
        ]
    return names


def play_round(
    admin: Client,
    number: int,
    tag: str,
    creators: list[Agent],
    reviewers: list[Agent],
) -> RoundOutcome:
    round_id = f"review-{tag}-{number}"
    run_id = f"run-{tag}"
    task = TASKS[(number - 1) % len(TASKS)]
    creator = creators[(number - 1) % len(creators)]
    made = admin.rounds_create(
        round_id=round_id, run_id=run_id, participants=[a.name for a in creators + reviewers]
    )

    # The creator produces: its draft goes to the content store, a pointer to the ledger.
    draft = f"{creator.name} draft for: {task} (logs the request body, no tests)"
    item = creator.client.content_items_create(
        content=draft, run_id=run_id, type="custom", tags=["draft", round_id]
    )
    creator.client.events_create(
        kind="artifact.proposed",
        run_id=run_id,
        round_id=round_id,
        payload={"content_item": item["id"], "task": task},
    )

    # The Devil's Advocate is drawn among the reviewers, weighted by their trust.
    pick = admin.trust_devils_advocate(candidates=[r.name for r in reviewers], seed=number)
    dissents = []
    for reviewer in reviewers:
        focus = REVIEWER_FOCUS[reviewer.name.removesuffix(f"-{tag}")]
        advocate = reviewer.name == pick["picked"]
        opening = "As devil's advocate: the" if advocate else "The"
        text = (
            f"{opening} draft for '{task}' falls short "
            f"on {', '.join(focus)}: it logs the full request body and ships without a test "
            "that fails when the signature check is removed."
        )
        dissents.append(
            reviewer.client.dissents_create(text=text, round_id=round_id, rubric_citations=focus)
        )

    # A person overrides the draft, and says which dissents changed the outcome.
    decision = f"{task} Request bodies are redacted in logs; a signature test is added."
    override = admin.overrides_create(
        agent=creator.name,
        round_id=round_id,
        agent_output=draft,
        human_decision=decision,
        decided_by="human:dana",
    )
    for dissent in dissents:
        landed = any(c in ("security", "tests") for c in dissent.get("rubric_citations", []))
        admin.dissents_impact(dissent["id"], impact=landed, feedback_incorporated=landed)
    admin.rounds_finalize(made["id"], final_output=decision)
    return RoundOutcome(
        round=made, creator=creator, draft=draft, override=override, devils_advocate=pick
    )


def print_trust_table(admin: Client, tag: str) -> None:
    print(
        f"\n{'agent':<22} {'trust':>6} {'probation':>9} {'rounds':>6} {'dissents':>8} "
        f"{'overrides':>9}"
    )
    for row in admin.trust_iter():
        if not row["name"].endswith(f"-{tag}"):
            continue
        probation = "yes" if row["on_probation"] else "no"
        print(
            f"{row['name']:<22} {row['trust_score']:>6.3f} {probation:>9} "
            f"{row['rounds_participated']:>6} {row['dissents']:>8} {row['overrides']:>9}"
        )


def print_metrics(admin: Client) -> None:
    totals = admin.trust_metrics(bucket="day")["totals"]

    def rate(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    print(
        f"\nmetrics (tenant, last 90 days): dissents {totals['dissents']}, "
        f"impact rate {rate(totals['dissent_impact_rate'])}, overrides {totals['overrides']}, "
        f"regretted {totals['overrides_regretted']}, regret rate {rate(totals['regret_rate'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="service URL (default $AGENT_MEMORY_URL or :8000)")
    parser.add_argument("--api-key", help="a tenant admin key (default $AGENT_MEMORY_API_KEY)")
    # From round PROBATION_MIN_ROUNDS (5) on the reviewers are off probation, and the Devil's
    # Advocate is drawn by trust instead of from everyone.
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tag", default=uuid.uuid4().hex[:6], help="suffix of every name")
    args = parser.parse_args()

    with Client(base_url=args.url, api_key=args.api_key) as admin:
        tag = args.tag
        creators = [register(admin, admin.base_url, f"Creator-{c}-{tag}", "creator") for c in "AB"]
        reviewers = [
            register(admin, admin.base_url, f"{r}-{tag}", "reviewer") for r in REVIEWER_FOCUS
        ]
        criteria = ensure_rubric(admin)
        print(f"agents registered ({tag}); rubric: {', '.join(criteria)}")

        played = []
        for number in range(1, args.rounds + 1):
            outcome = play_round(admin, number, tag, creators, reviewers)
            pick = outcome.devils_advocate
            print(
                f"round {number}: {outcome.round['round_id']} finalised; devil's advocate "
                f"{pick['picked']}"
                + (
                    " (all on probation: drawn from everyone)"
                    if pick["fallback"]
                    else f" (weights {dict(zip(pick['eligible'], pick['weights'], strict=True))})"
                )
            )
            played.append(outcome)

        # Later the team restores the first round's creator draft: the human override of that
        # round is reverted (regretted), which lifts the creator and weighs against the decider.
        first = played[0]
        version = admin.rounds_versions(
            first.round["id"], content=first.draft, author=first.creator.name
        )
        reverted = admin.overrides_get(first.override["id"])
        print(
            f"round 1 reverted: version {version['number']} restores {first.creator.name}'s "
            f"draft; override {reverted['id']} reverted_by={reverted['reverted_by']} "
            f"regret={reverted['regret']}"
        )

        print_trust_table(admin, tag)
        print_metrics(admin)
        for agent in creators + reviewers:
            agent.client.close()


if __name__ == "__main__":
    main()
