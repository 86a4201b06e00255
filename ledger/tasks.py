from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from celery import Task, shared_task

from ledger.anchors import anchored_tenants_missing, chain_checkpoint
from ledger.jobs import (
    CHAIN_VERIFY_JOB,
    CHECKPOINT_JOB,
    JOB_TASK_OPTIONS,
    Batch,
    JobFailed,
    job_progress,
    job_task_run,
)
from ledger.models import Tenant
from ledger.services import idempotency_records_expire


@shared_task(name="ledger.tasks.idempotency_records_expire", **JOB_TASK_OPTIONS)
def idempotency_records_expire_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self,
        name="ledger.idempotency_expiry",
        batches=lambda: iter([Batch(rows=idempotency_records_expire(), more=False)]),
    )


def _chain_batches(job: str, *, full: bool) -> Iterator[Batch]:
    """One tenant's chain per batch (verification streams it), resuming an unfinished run.

    Each chain that holds gets its head checkpointed (ledger/anchors.py); ``full`` walks every
    chain from its first event, else only what was appended since its last checkpoint. A broken
    chain does not stop the walk: every tenant is checked, then the run fails naming how many
    chains broke; which tenants and where go to the operator only (``details``), as do tenants
    that have checkpoints but are gone from the database.
    """
    progress = job_progress(job)
    resume = not progress.get("done", True)
    after = int(progress.get("after_tenant", 0)) if resume else 0
    broken: list[dict[str, Any]] = list(progress.get("broken", [])) if resume else []
    for tenant in Tenant.objects.filter(pk__gt=after).order_by("pk"):
        report = chain_checkpoint(tenant=tenant, full=full)
        if not report.ok:
            broken.append(
                {
                    "tenant_id": tenant.pk,
                    "seq": report.first_broken_seq,
                    "code": report.code,
                    "reason": report.reason,
                }
            )
        yield Batch(
            rows=report.events_checked,
            more=True,
            details={"after_tenant": tenant.pk, "broken": broken, "done": False},
        )
    broken += [
        {"tenant_id": tenant_id, "seq": None, "code": gone.code, "reason": gone.reason}
        for tenant_id, gone in anchored_tenants_missing().items()
    ]
    if broken:
        raise JobFailed(f"{len(broken)} hash chain(s) broken", {"broken": broken, "done": True})
    yield Batch(rows=0, more=False, details={"done": True})


@shared_task(name="ledger.tasks.event_chains_verify", **JOB_TASK_OPTIONS)
def event_chains_verify_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self, name=CHAIN_VERIFY_JOB, batches=lambda: _chain_batches(CHAIN_VERIFY_JOB, full=True)
    )


@shared_task(name="ledger.tasks.chains_checkpoint", **JOB_TASK_OPTIONS)
def chains_checkpoint_task(self: Task[Any, Any]) -> dict[str, Any]:
    return job_task_run(
        self, name=CHECKPOINT_JOB, batches=lambda: _chain_batches(CHECKPOINT_JOB, full=False)
    )
