"""The job runner (ledger/jobs.py): run records, the per-job lock, the budget, health, the API."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from config.health import worker_heartbeat_record
from ledger.jobs import JOBS, Batch, JobFailed, job_progress, job_run, job_schedules_ensure
from ledger.models import Event, JobRun, Role


def counted(*sizes: int) -> Iterator[Batch]:
    for position, rows in enumerate(sizes):
        yield Batch(rows=rows, more=position < len(sizes) - 1)


@pytest.mark.django_db
def test_it_records_a_run_with_its_rows_and_duration():
    outcome = job_run(name="memory.decay", batches=lambda: counted(3, 2))

    run = JobRun.objects.get(job="memory.decay")
    assert (outcome.status, outcome.rows, outcome.more) == ("succeeded", 5, False)
    assert (run.status, run.rows_touched, run.error) == ("succeeded", 5, "")
    assert run.finished_at is not None
    assert run.finished_at >= run.started_at
    assert run.duration_seconds is not None
    assert run.duration_seconds >= 0


@pytest.mark.django_db
def test_it_stops_at_the_budget_and_says_work_is_left():
    outcome = job_run(name="memory.decay", batches=lambda: counted(1, 1, 1), budget_seconds=0)

    assert (outcome.rows, outcome.more) == (1, True)
    assert JobRun.objects.get(job="memory.decay").requeued is True


@pytest.mark.django_db
def test_it_records_an_exception_by_its_type_only_and_raises_it():
    def failing() -> Iterator[Batch]:
        yield Batch(rows=4, more=True)
        raise ValueError("tenant acme's secret")

    with pytest.raises(ValueError, match="secret"):
        job_run(name="memory.ttl", batches=failing)

    run = JobRun.objects.get(job="memory.ttl")
    assert (run.status, run.rows_touched, run.error) == ("failed", 4, "ValueError")
    assert "secret" in run.details["traceback"]  # for the operator, in the admin


@pytest.mark.django_db
def test_a_job_failure_keeps_its_message_and_details_apart():
    def broken() -> Iterator[Batch]:
        yield Batch(rows=10, more=True, details={"after_tenant": 7, "done": False})
        raise JobFailed("1 hash chain(s) broken", {"broken": [{"tenant_id": 7}], "done": True})

    outcome = job_run(name="ledger.chain_verify", batches=broken)

    run = JobRun.objects.get(job="ledger.chain_verify")
    assert (outcome.status, run.error) == ("failed", "1 hash chain(s) broken")
    assert run.details == {"after_tenant": 7, "broken": [{"tenant_id": 7}], "done": True}


@pytest.mark.django_db
def test_a_run_left_running_by_a_dead_worker_is_marked_abandoned():
    JobRun.objects.create(
        job="memory.quota", status="running", started_at=timezone.now() - timedelta(hours=1)
    )

    job_run(name="memory.quota", batches=lambda: counted(0))

    statuses = list(JobRun.objects.order_by("pk").values_list("status", flat=True))
    assert statuses == ["abandoned", "succeeded"]


@pytest.mark.django_db
def test_runs_older_than_thirty_days_are_deleted_when_the_job_runs_again():
    now = timezone.now()
    old = JobRun.objects.create(
        job="memory.decay", status="succeeded", started_at=now - timedelta(days=31)
    )
    recent = JobRun.objects.create(
        job="memory.decay", status="succeeded", started_at=now - timedelta(days=29)
    )
    other_job = JobRun.objects.create(
        job="memory.ttl", status="succeeded", started_at=now - timedelta(days=31)
    )

    job_run(name="memory.decay", batches=lambda: counted(0))

    assert not JobRun.objects.filter(pk=old.pk).exists()
    assert JobRun.objects.filter(pk__in=[recent.pk, other_job.pk]).count() == 2


@pytest.mark.django_db
def test_the_progress_of_the_latest_run_is_kept_for_the_next():
    def with_watermark() -> Iterator[Batch]:
        yield Batch(rows=1, more=True, details={"after_event_id": 40})
        yield Batch(rows=1, more=False, details={"after_event_id": 90})

    job_run(name="memory.reflections", batches=with_watermark)

    assert job_progress("memory.reflections") == {"after_event_id": 90}
    assert job_progress("memory.decay") == {}


@pytest.mark.django_db(transaction=True)
def test_a_second_run_while_the_first_holds_the_lock_is_skipped():
    inside = threading.Event()
    release = threading.Event()
    results: list[str] = []

    def slow() -> Iterator[Batch]:
        inside.set()
        release.wait(10)
        yield Batch(rows=1, more=False)

    def first() -> None:
        from django.db import connection

        try:
            results.append(job_run(name="memory.decay", batches=slow).status)
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)

    second = job_run(name="memory.decay", batches=lambda: counted(5))
    release.set()
    thread.join(10)

    assert second.status == "skipped"
    assert results == ["succeeded"]
    assert sorted(JobRun.objects.values_list("status", "rows_touched")) == [
        ("skipped", 0),
        ("succeeded", 1),
    ]


def _fail(name: str) -> None:
    def failing() -> Iterator[Batch]:
        raise RuntimeError("down")
        yield Batch(0, False)  # pragma: no cover (makes this a generator)

    with pytest.raises(RuntimeError):
        job_run(name=name, batches=failing)


@pytest.mark.django_db
def test_healthz_is_unhealthy_when_a_job_failed_its_last_three_runs(client):
    worker_heartbeat_record()
    _fail("trust.regret_inference")
    _fail("trust.regret_inference")
    job_run(name="trust.regret_inference", batches=lambda: counted(0))  # a skip or success
    _fail("trust.regret_inference")
    _fail("trust.regret_inference")
    assert client.get("/healthz").status_code == 200

    _fail("trust.regret_inference")
    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["jobs"] == {
        "ok": False,
        "error": "failed its last 3 runs",
        "failing": ["trust.regret_inference"],
    }


@pytest.mark.django_db
def test_skipped_runs_do_not_hide_failures_nor_count_as_them(client):
    worker_heartbeat_record()
    for _ in range(3):
        _fail("memory.ttl")
        JobRun.objects.create(job="memory.ttl", status="skipped", started_at="2099-01-01T00:00Z")

    assert client.get("/healthz").json()["checks"]["jobs"]["failing"] == ["memory.ttl"]


@pytest.mark.django_db
def test_the_schedules_are_seeded_once_and_edits_survive():
    PeriodicTask.objects.filter(name__in=list(JOBS)).delete()
    assert job_schedules_ensure() == len(JOBS)
    regret = PeriodicTask.objects.get(name="trust.regret_inference")
    regret.interval, _ = IntervalSchedule.objects.get_or_create(every=7, period="minutes")
    regret.save()

    assert job_schedules_ensure() == 0
    assert PeriodicTask.objects.get(name="trust.regret_inference").interval.every == 7


def test_every_registered_task_exists():
    from config.celery import app

    app.loader.import_default_modules()
    assert {spec.task for spec in JOBS.values()} <= set(app.tasks)


@pytest.mark.django_db
def test_the_api_lists_every_job_with_schedule_runs_and_next_due_time(tenant, api_as):
    job_schedules_ensure()
    job_run(name="trust.regret_inference", batches=lambda: counted(2, 1))

    response = api_as(tenant, role=Role.ADMIN).get("/api/v1/jobs/")

    assert response.status_code == 200
    jobs = {job["name"]: job for job in response.json()["results"]}
    assert set(jobs) == set(JOBS)
    regret = jobs["trust.regret_inference"]
    assert regret["schedule"] == "every 5 minutes"
    assert regret["enabled"] is True
    assert regret["healthy"] is True
    assert regret["next_due_at"] is not None
    assert [(r["status"], r["rows_touched"]) for r in regret["last_runs"]] == [("succeeded", 3)]
    assert "UTC" in jobs["trust.windows"]["schedule"]


@pytest.mark.django_db
def test_every_tenants_admin_sees_the_same_global_status(tenant, other_tenant, api_as):
    job_schedules_ensure()
    _fail("memory.decay")

    mine = api_as(tenant, role=Role.ADMIN).get("/api/v1/jobs/").json()
    theirs = api_as(other_tenant, role=Role.ADMIN).get("/api/v1/jobs/").json()

    def without_clock(body: dict) -> list[dict]:
        # A job never run is due "now", which moves between the two calls.
        return [{**job, "next_due_at": None} for job in body["results"]]

    assert without_clock(mine) == without_clock(theirs)
    decay = next(job for job in mine["results"] if job["name"] == "memory.decay")
    assert decay["last_runs"][0]["error"] == "RuntimeError"
    assert "details" not in decay["last_runs"][0]


@pytest.mark.django_db(transaction=True)
def test_a_broken_chain_fails_the_verification_run_without_naming_the_tenant(tenant, other_tenant):
    from ledger.tasks import event_chains_verify_task
    from tests.ledger.test_chain import append_n
    from tests.tampering import tamper

    append_n(tenant, 3)
    events = append_n(other_tenant, 3)
    tamper(
        "UPDATE ledger_event SET payload = %s::jsonb WHERE id = %s",
        ['{"text": "forged"}', events[1].pk],
    )

    event_chains_verify_task.apply()

    run = JobRun.objects.get(job="ledger.chain_verify")
    assert run.status == "failed"
    assert run.error == "1 hash chain(s) broken"
    assert run.details["done"] is True
    assert [(b["tenant_id"], b["seq"]) for b in run.details["broken"]] == [
        (other_tenant.pk, events[1].seq)
    ]


@pytest.mark.django_db
def test_sound_chains_pass_and_the_next_run_starts_over(tenant, other_tenant):
    from ledger.tasks import event_chains_verify_task
    from tests.ledger.test_chain import append_n

    append_n(tenant, 3)
    append_n(other_tenant, 2)

    event_chains_verify_task.apply()
    event_chains_verify_task.apply()

    runs = list(JobRun.objects.order_by("pk").values_list("status", "rows_touched"))
    checked = Event.objects.count()  # every event of every chain, the tenants' own included
    assert runs == [("succeeded", checked), ("succeeded", checked)]


def test_each_app_registers_its_own_jobs():
    from memory.tasks import JOB_SPECS as MEMORY_JOBS
    from trust.tasks import JOB_SPECS as TRUST_JOBS

    by_app = {"memory": MEMORY_JOBS, "trust": TRUST_JOBS}
    for app, specs in by_app.items():
        assert {name for name in JOBS if name.startswith(f"{app}.")} == {s.name for s in specs}
        assert all(spec.task.startswith(f"{app}.tasks.") for spec in specs)
    ledger_jobs = {spec.task for name, spec in JOBS.items() if name.startswith("ledger.")}
    assert ledger_jobs
    assert all(task.startswith("ledger.tasks.") for task in ledger_jobs)


def test_a_job_name_cannot_be_registered_twice_with_another_task():
    from ledger.jobs import Every, JobSpec, job_register

    spec = next(iter(JOBS.values()))
    job_register(spec)  # the same spec again (a second ready()) changes nothing
    assert JOBS[spec.name] is spec
    with pytest.raises(ValueError, match="already registered"):
        job_register(JobSpec(spec.name, "elsewhere.tasks.other", "", Every(minutes=1)))


@pytest.mark.django_db
def test_a_daily_job_that_never_ran_is_next_due_at_its_hour_not_now():
    from ledger.jobs import CHAIN_VERIFY_JOB, job_statuses

    job_schedules_ensure()
    now = timezone.now()
    assert not PeriodicTask.objects.filter(name=CHAIN_VERIFY_JOB, last_run_at__isnull=False)

    status = next(s for s in job_statuses(now=now) if s.name == CHAIN_VERIFY_JOB)

    # Daily at 03:00 UTC (ledger.jobs.CHAIN_VERIFY): the next 03:00 after the row was made.
    expected = now.replace(hour=3, minute=0, second=0, microsecond=0)
    if expected <= now:
        expected += timedelta(days=1)
    assert abs((status.next_due_at - expected).total_seconds()) < 5


@pytest.mark.django_db
def test_an_interval_job_that_never_ran_is_due_one_interval_after_its_row_changed():
    from ledger.jobs import job_statuses

    job_schedules_ensure()
    made = timezone.now() - timedelta(minutes=2)
    PeriodicTask.objects.filter(name="trust.regret_inference").update(date_changed=made)

    status = next(s for s in job_statuses() if s.name == "trust.regret_inference")

    # Every 5 minutes, counted from the row's change as beat counts it: 3 minutes from now.
    assert abs((status.next_due_at - (made + timedelta(minutes=5))).total_seconds()) < 5
