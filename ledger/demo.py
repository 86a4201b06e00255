"""The first-run identity and demo data that ``python manage.py up`` makes sure exist.

Every function here is idempotent: ``up`` calls them on each start, and a second call finds what
the first made and adds nothing. Secrets (a generated admin password, the demo API key) are
returned only by the call that created them, so the caller can show them exactly once.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from config.api import Conflict
from ledger.jobs import JOBS
from ledger.models import Agent, ApiKey, Event, JobRun, Membership, Role, Tenant
from ledger.services import (
    SYSTEM_ACTOR,
    EventDraft,
    agent_create,
    api_key_create,
    events_append,
    membership_grant,
    tenant_create,
)

DEMO_TENANT_SLUG = "demo"
DEMO_TENANT_NAME = "Demo"
DEMO_API_KEY_NAME = "demo admin key"
ORCHESTRATOR = "orchestrator"
JUDGE = "judge"


@dataclass(frozen=True)
class AdminEnsured:
    user: AbstractBaseUser
    created: bool
    # Set only when this call created the user with a password it made up.
    generated_password: str | None = None


@dataclass(frozen=True)
class DemoSeeded:
    agents_created: list[str] = field(default_factory=list)
    runs_seeded: list[str] = field(default_factory=list)
    events_appended: int = 0
    # The demo key's secret, set only by the call that created the key.
    api_key: str | None = None
    # What each other app's seeder added, e.g. {"memory": "12 memories, 9 action results"}.
    extras: dict[str, str] = field(default_factory=dict)


# The other apps' demo data (memories, content, trust), registered from their AppConfig.ready():
# ledger imports neither app, the same way projections register. A seeder is idempotent like the
# rest of this module and returns a short note of what it added ("" when nothing).
DemoSeeder = Callable[[Tenant], str]
_DEMO_SEEDERS: dict[str, DemoSeeder] = {}


def demo_seeder_register(name: str, seeder: DemoSeeder) -> None:
    _DEMO_SEEDERS[name] = seeder


def demo_tenant_ensure() -> tuple[Tenant, bool]:
    """The demo tenant, created if missing. Returns it and whether this call created it."""
    existing = Tenant.objects.filter(slug=DEMO_TENANT_SLUG).first()
    if existing is not None:
        return existing, False
    try:
        return tenant_create(name=DEMO_TENANT_NAME, slug=DEMO_TENANT_SLUG), True
    except Conflict:
        # Someone else created it between our read and our insert; theirs is as good as ours.
        return Tenant.objects.get(slug=DEMO_TENANT_SLUG), False


def admin_user_ensure(*, tenant: Tenant, username: str, password: str | None) -> AdminEnsured:
    """A superuser named ``username`` with an admin seat in ``tenant``.

    A missing user is created with ``password``, or with a generated one when none is given. An
    existing user's password is never changed here: ``up`` runs this on every start, and a
    restart must not undo a password someone set since (``manage.py changepassword`` does that).
    """
    user_model = get_user_model()
    generated: str | None = None
    with transaction.atomic():
        user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
        created = user is None
        if user is None:
            if not password:
                generated = password = secrets.token_urlsafe(18)
            user = user_model._default_manager.create_superuser(
                **{user_model.USERNAME_FIELD: username}, email="", password=password
            )
        has_admin_seat = Membership.objects.filter(
            tenant=tenant, user_id=user.pk, role=Role.ADMIN
        ).exists()
        if not has_admin_seat:
            membership_grant(tenant=tenant, user=user, role=Role.ADMIN, actor=SYSTEM_ACTOR)
    return AdminEnsured(user=user, created=created, generated_password=generated)


# --- Demo data ---------------------------------------------------------------------------------

_DEMO_AGENTS: list[dict[str, str]] = [
    {"name": "Creator1", "model": "gpt-4o", "primary_role": "creator"},
    {"name": "Reviewer1", "model": "claude-3-5-sonnet", "primary_role": "reviewer"},
    {"name": "Reviewer2", "model": "llama-3.1-70b-instruct", "primary_role": "reviewer"},
    {"name": "Curator1", "model": "gpt-4o-mini", "primary_role": "curator"},
]

# One script per run: (round number, actor, kind, payload). Round 0 is the run itself.
_Script = list[tuple[int, str, str, dict[str, Any]]]

_DEMO_RUNS: dict[str, tuple[str, _Script]] = {
    "run_20250214_153000": (
        "Find out why the nightly orders_daily ETL job started failing on 2025-02-13",
        [
            (
                1,
                ORCHESTRATOR,
                "world.observed",
                {
                    "source": "scheduler",
                    "observation": "orders_daily failed at 02:14 UTC with exit code 137 "
                    "after 41 minutes; the previous 30 runs succeeded in 35-38 minutes.",
                },
            ),
            (
                1,
                "Creator1",
                "agent.thought",
                {"text": "Exit code 137 is SIGKILL. On a container that usually means OOM."},
            ),
            (
                1,
                "Creator1",
                "hypothesis.proposed",
                {
                    "hypothesis_id": "h1",
                    "text": "The job now exceeds its memory limit because the orders table grew.",
                    "confidence": 0.6,
                },
            ),
            (
                1,
                "Reviewer1",
                "agent.spoke",
                {
                    "text": "Input rows grew only 4% week over week; that alone should not "
                    "push a job with 40% memory headroom over the edge."
                },
            ),
            (
                1,
                "Reviewer2",
                "clue.found",
                {
                    "clue": "Deploy 2025-02-12T17:05Z lowered the job's memory limit "
                    "from 8 GiB to 4 GiB.",
                    "source": "deploy log",
                },
            ),
            (
                1,
                JUDGE,
                "judge.verdict",
                {
                    "round": 1,
                    "winner": "Reviewer2",
                    "verdict": "OOM is likely, but the cause is the limit change, not growth.",
                    "scores": {"Creator1": 0.55, "Reviewer1": 0.7, "Reviewer2": 0.9},
                },
            ),
            (
                1,
                ORCHESTRATOR,
                "workflow.step_completed",
                {"step": "triage", "duration_ms": 48210},
            ),
            (
                2,
                "Creator1",
                "hypothesis.proposed",
                {
                    "hypothesis_id": "h2",
                    "text": "The 2025-02-12 deploy halved the memory limit; peak usage is "
                    "about 5.1 GiB, so the kernel kills the job near the end.",
                    "confidence": 0.85,
                },
            ),
            (
                2,
                "Reviewer1",
                "agent.spoke",
                {"text": "Agreed. Peak RSS in the last good run was 5.08 GiB, which fits."},
            ),
            (
                2,
                "Curator1",
                "agent.spoke",
                {
                    "text": "Filing this as a known failure mode: resource limits changed "
                    "in an unrelated deploy."
                },
            ),
            (
                2,
                JUDGE,
                "judge.verdict",
                {
                    "round": 2,
                    "winner": "Creator1",
                    "verdict": "h2 explains the timing and the exit code.",
                    "scores": {"Creator1": 0.9, "Reviewer1": 0.8, "Curator1": 0.6},
                },
            ),
            (
                2,
                ORCHESTRATOR,
                "verdict.final",
                {
                    "answer": "Restore the 8 GiB memory limit for orders_daily; the "
                    "2025-02-12 deploy lowered it below the job's peak usage.",
                    "hypothesis_id": "h2",
                    "supported_by": ["Creator1", "Reviewer1", "Reviewer2"],
                    "dissent": [],
                },
            ),
            (
                2,
                ORCHESTRATOR,
                "workflow.step_completed",
                {"step": "root_cause", "duration_ms": 61377},
            ),
        ],
    ),
    "run_20250215_091000": (
        "Decide whether pull request #482 (retries for payment webhooks) is safe to merge",
        [
            (
                1,
                ORCHESTRATOR,
                "world.observed",
                {
                    "source": "github",
                    "observation": "PR #482 wraps webhook delivery in up to 5 retries with "
                    "exponential backoff; CI is green.",
                },
            ),
            (
                1,
                "Creator1",
                "agent.spoke",
                {"text": "The change is small and well tested. I propose we merge it."},
            ),
            (
                1,
                "Reviewer2",
                "agent.thought",
                {"text": "Retries on payment events are only safe if the receiver is idempotent."},
            ),
            (
                1,
                "Reviewer2",
                "clue.found",
                {
                    "clue": "The receiver in billing/webhooks.py has no idempotency key check.",
                    "source": "code review",
                },
            ),
            (
                1,
                "Reviewer1",
                "agent.spoke",
                {
                    "text": "Upstream already deduplicates by event id, so duplicates "
                    "should not reach billing."
                },
            ),
            (
                1,
                JUDGE,
                "judge.verdict",
                {
                    "round": 1,
                    "winner": "Reviewer2",
                    "verdict": "Duplicate deliveries are possible when the upstream "
                    "deduplication window (10 min) is shorter than the retry schedule.",
                    "scores": {"Creator1": 0.5, "Reviewer1": 0.55, "Reviewer2": 0.85},
                },
            ),
            (
                2,
                "Creator1",
                "hypothesis.proposed",
                {
                    "hypothesis_id": "h1",
                    "text": "Merge after capping the retry schedule at 8 minutes, inside "
                    "the deduplication window.",
                    "confidence": 0.7,
                },
            ),
            (
                2,
                "Reviewer2",
                "agent.spoke",
                {
                    "text": "I still dissent: the receiver should check an idempotency key; "
                    "a timing cap is fragile."
                },
            ),
            (
                2,
                "Curator1",
                "agent.spoke",
                {"text": "Recording the dissent so a later incident can be traced back to it."},
            ),
            (
                2,
                ORCHESTRATOR,
                "verdict.final",
                {
                    "answer": "Merge PR #482 with the retry schedule capped at 8 minutes.",
                    "hypothesis_id": "h1",
                    "supported_by": ["Creator1", "Reviewer1"],
                    "dissent": ["Reviewer2"],
                },
            ),
            (
                2,
                ORCHESTRATOR,
                "workflow.step_completed",
                {"step": "review", "duration_ms": 39804},
            ),
        ],
    ),
}


def _run_drafts(run_id: str, goal: str, script: _Script) -> list[EventDraft]:
    drafts = [
        EventDraft(
            kind="run.started",
            actor=ORCHESTRATOR,
            payload={"goal": goal, "agents": [agent["name"] for agent in _DEMO_AGENTS]},
            run_id=run_id,
        )
    ]
    for turn, (round_number, actor, kind, payload) in enumerate(script, start=1):
        drafts.append(
            EventDraft(
                kind=kind,
                actor=actor,
                payload=payload,
                run_id=run_id,
                round_id=f"{run_id}/round_{round_number}",
                turn=turn,
            )
        )
    return drafts


def demo_data_seed(*, tenant: Tenant) -> DemoSeeded:
    """Demo agents, two recorded runs and a tenant-wide admin key, each added only if missing.

    A run counts as present when its ``run.started`` event exists; a run's events are appended
    in one transaction, so a run is either wholly there or not at all.
    """
    agents_created: list[str] = []
    runs_seeded: list[str] = []
    events_appended = 0
    raw_key: str | None = None
    with transaction.atomic():
        existing = set(Agent.objects.for_tenant(tenant).values_list("name", flat=True))
        for spec in _DEMO_AGENTS:
            if spec["name"] not in existing:
                agent_create(
                    tenant=tenant,
                    actor=SYSTEM_ACTOR,
                    name=spec["name"],
                    model=spec["model"],
                    primary_role=spec["primary_role"],
                )
                agents_created.append(spec["name"])
        started = set(
            Event.objects.for_tenant(tenant)
            .filter(kind="run.started", run_id__in=list(_DEMO_RUNS))
            .values_list("run_id", flat=True)
        )
        for run_id, (goal, script) in _DEMO_RUNS.items():
            if run_id in started:
                continue
            events_appended += len(
                events_append(tenant=tenant, drafts=_run_drafts(run_id, goal, script))
            )
            runs_seeded.append(run_id)
        if not ApiKey.objects.for_tenant(tenant).filter(name=DEMO_API_KEY_NAME).exists():
            _, raw_key = api_key_create(
                tenant=tenant, name=DEMO_API_KEY_NAME, role=Role.ADMIN, actor=SYSTEM_ACTOR
            )
    # After the ledger's part committed: the seeders build on its agents and runs, and each
    # commits on its own, so one app's failure does not take the others' data with it.
    extras = {name: note for name, seeder in _DEMO_SEEDERS.items() if (note := seeder(tenant))}
    return DemoSeeded(
        agents_created=agents_created,
        runs_seeded=runs_seeded,
        events_appended=events_appended,
        api_key=raw_key,
        extras=extras,
    )


def demo_first_job_runs_queue() -> int:
    """Queue every job that never ran, so the jobs page shows runs as soon as the worker starts
    instead of after each job's first interval. The jobs are safe to run at any time."""
    from config.celery import app

    ran = set(JobRun.objects.values_list("job", flat=True).distinct())
    due = [spec.task for name, spec in JOBS.items() if name not in ran]
    for task in due:
        app.send_task(task)
    return len(due)
