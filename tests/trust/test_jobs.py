"""The trust app's background jobs, run in-process as the worker runs them (``task.apply()``).

Regret inference at its deadline (just before, at, just after) is tested on the service in
tests/trust/test_services.py; the job runs that service unchanged.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from ledger.models import Agent, JobRun
from trust.tasks import trust_windows_slide_task

pytestmark = pytest.mark.django_db

STALE = 0.123  # a score no recompute gives an agent without evidence


@pytest.fixture
def agents(tenant, other_tenant, make_agent, settings):
    settings.JOB_BATCH_SIZE = 1  # one agent per batch: the keyset crosses tenants
    made = [make_agent(each, name=f"Agent{n}") for each in (tenant, other_tenant) for n in range(2)]
    Agent.objects.update(trust_score=STALE)
    return made


def last_run() -> JobRun:
    run = JobRun.objects.filter(job="trust.windows").order_by("pk").last()
    assert run is not None
    return run


def test_the_window_job_recomputes_every_tenants_agents_once(agents):
    trust_windows_slide_task.apply()
    first = last_run()
    trust_windows_slide_task.apply()

    assert (first.status, first.rows_touched, first.details) == ("succeeded", 4, {"done": True})
    assert last_run().rows_touched == 0
    assert not Agent.objects.filter(trust_score=STALE).exists()


def test_an_unfinished_window_run_is_resumed_where_it_stopped(agents, other_tenant):
    JobRun.objects.create(
        job="trust.windows",
        status="abandoned",
        started_at=timezone.now(),
        details={"after_tenant": other_tenant.pk, "after_agent": agents[2].pk, "done": False},
    )

    trust_windows_slide_task.apply()

    assert last_run().rows_touched == 1
    assert list(Agent.objects.filter(trust_score=STALE).order_by("pk")) == agents[:3]
