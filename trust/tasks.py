from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from celery import Task, shared_task
from django.conf import settings

from ledger.jobs import (
    JOB_TASK_OPTIONS,
    Batch,
    Daily,
    Every,
    JobSpec,
    batches_until_short,
    job_progress,
    job_task_run,
)
from ledger.models import Agent, Tenant
from trust.rounds.services import (
    dissent_embeddings_backfill,
    overrides_infer_regret,
    trust_recompute,
)

REGRET_INFERENCE_JOB = "trust.regret_inference"
WINDOWS_JOB = "trust.windows"
DISSENT_EMBEDDINGS_BACKFILL_JOB = "trust.dissent_embeddings_backfill"


def _regret_batches() -> Iterator[Batch]:
    # The service already works tenant by tenant in committed batches until nothing is left, with
    # its own batch size: each batch recomputes the touched agents' trust, so its batches are
    # larger than JOB_BATCH_SIZE (see its docstring).
    yield Batch(rows=overrides_infer_regret(), more=False)


@shared_task(name="trust.tasks.overrides_infer_regret", **JOB_TASK_OPTIONS)
def overrides_infer_regret_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(self, name=REGRET_INFERENCE_JOB, batches=_regret_batches)


def _window_batches() -> Iterator[Batch]:
    """Every tenant's agents in batches, resuming where an unfinished (cut or killed) run got to.

    Recomputing is idempotent (only changed scores are recorded), so a batch redone after a kill
    records nothing twice.
    """
    progress = job_progress(WINDOWS_JOB)
    resume = not progress.get("done", True)
    after_tenant = int(progress.get("after_tenant", 0)) if resume else 0
    after_agent = int(progress.get("after_agent", 0)) if resume else 0
    batch_size = settings.JOB_BATCH_SIZE
    for tenant in Tenant.objects.filter(pk__gte=after_tenant).order_by("pk"):
        after = after_agent if tenant.pk == after_tenant else 0
        while True:
            ids = list(
                Agent.objects.filter(tenant=tenant, pk__gt=after)
                .order_by("pk")
                .values_list("pk", flat=True)[:batch_size]
            )
            if not ids:
                break
            changed = trust_recompute(tenant=tenant, agent_ids=ids, reason="window_slid")
            after = ids[-1]
            yield Batch(
                rows=changed,
                more=True,
                details={"after_tenant": tenant.pk, "after_agent": after, "done": False},
            )
    yield Batch(rows=0, more=False, details={"done": True})


@shared_task(name="trust.tasks.trust_windows_slide", **JOB_TASK_OPTIONS)
def trust_windows_slide_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(self, name=WINDOWS_JOB, batches=_window_batches)


@shared_task(name="trust.tasks.dissent_embeddings_backfill", **JOB_TASK_OPTIONS)
def dissent_embeddings_backfill_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self,
        name=DISSENT_EMBEDDINGS_BACKFILL_JOB,
        batches=lambda: batches_until_short(
            lambda n: dissent_embeddings_backfill(batch_size=n), batch_size=256
        ),
    )


# The trust app's periodic jobs, registered with ledger.jobs by TrustConfig.ready.
JOB_SPECS = (
    JobSpec(
        DISSENT_EMBEDDINGS_BACKFILL_JOB,
        dissent_embeddings_backfill_task.name,
        "Embed dissents logged while the embedder was unavailable.",
        Every(minutes=10),
    ),
    JobSpec(
        REGRET_INFERENCE_JOB,
        overrides_infer_regret_task.name,
        "Mark regret on overrides whose deadline passed with the round's output not the "
        "human decision.",
        Every(minutes=5),
    ),
    JobSpec(
        WINDOWS_JOB,
        trust_windows_slide_task.name,
        "Recompute every agent's trust score as old evidence leaves its window.",
        Daily(hour=2),
    ),
)
