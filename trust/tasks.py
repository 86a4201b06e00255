"""The trust app's Celery tasks: thin wrappers of the services' batches, and JOB_SPECS."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from ledger.jobs import JOB_TASK_OPTIONS, Daily, Every, JobSpec, job_task_run
from trust.rounds.overrides import overrides_infer_regret_batches
from trust.rounds.services import dissent_embeddings_backfill_batches
from trust.scores.services import trust_windows_slide_batches

REGRET_INFERENCE_JOB = "trust.regret_inference"
WINDOWS_JOB = "trust.windows"
DISSENT_EMBEDDINGS_BACKFILL_JOB = "trust.dissent_embeddings_backfill"


@shared_task(name="trust.tasks.overrides_infer_regret", **JOB_TASK_OPTIONS)
def overrides_infer_regret_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(self, name=REGRET_INFERENCE_JOB, batches=overrides_infer_regret_batches)


@shared_task(name="trust.tasks.trust_windows_slide", **JOB_TASK_OPTIONS)
def trust_windows_slide_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self, name=WINDOWS_JOB, batches=lambda: trust_windows_slide_batches(job=WINDOWS_JOB)
    )


@shared_task(name="trust.tasks.dissent_embeddings_backfill", **JOB_TASK_OPTIONS)
def dissent_embeddings_backfill_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self, name=DISSENT_EMBEDDINGS_BACKFILL_JOB, batches=dissent_embeddings_backfill_batches
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
