"""Changing the jobs' schedule in the app: who may, within which bounds, and the ledger events."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django_celery_beat.models import PeriodicTask
from pytest_django.asserts import assertContains, assertNotContains

from config.api import ApiError
from ledger.job_schedules import job_schedule_update
from ledger.jobs import job_schedules_ensure
from ledger.models import Event, Role
from ledger.people.services import membership_grant

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def schedules():
    job_schedules_ensure()


def operator_client(tenant, *, perm=True, staff=True):
    user = get_user_model().objects.create_user(username="ops", password="pw-12345678")
    user.is_staff = staff
    user.save()
    if perm:
        user.user_permissions.add(Permission.objects.get(codename="change_periodictask"))
    membership_grant(tenant=tenant, user=user, role=Role.ADMIN)
    client = Client()
    client.force_login(user)
    return client


def test_a_change_is_an_event_in_every_tenants_ledger(tenant, other_tenant):
    changes = job_schedule_update(
        name="memory.decay", actor="human:ops", enabled=False, every_minutes=30
    )
    assert set(changes) == {"enabled", "every_minutes"}
    task = PeriodicTask.objects.get(name="memory.decay")
    assert (task.enabled, task.interval.every) == (False, 30)
    for each in (tenant, other_tenant):
        event = Event.objects.get(tenant=each, kind="job_schedule.updated")
        assert event.payload["job"] == "memory.decay"
        assert event.payload["changes"] == {"enabled": False, "every_minutes": 30}
    again = job_schedule_update(
        name="memory.decay", actor="human:ops", enabled=False, every_minutes=30
    )
    assert again == {}
    assert Event.objects.filter(kind="job_schedule.updated").count() == 2


def test_a_daily_job_takes_a_utc_time(tenant):
    job_schedule_update(name="ledger.chain_verify", actor="x", enabled=True, daily_at=(4, 30))
    crontab = PeriodicTask.objects.get(name="ledger.chain_verify").crontab
    assert (crontab.hour, crontab.minute, str(crontab.timezone)) == ("4", "30", "UTC")


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"name": "ledger.chain_verify", "enabled": False, "daily_at": (3, 0)}, "job_always_on"),
        ({"name": "ledger.checkpoint", "enabled": False, "every_minutes": 5}, "job_always_on"),
        ({"name": "memory.decay", "enabled": True, "every_minutes": 0}, "invalid_schedule"),
        ({"name": "memory.decay", "enabled": True, "every_minutes": 1441}, "invalid_schedule"),
        ({"name": "ledger.chain_verify", "enabled": True, "daily_at": (24, 0)}, "invalid_schedule"),
        ({"name": "nope", "enabled": True, "every_minutes": 5}, "not_found"),
    ],
)
def test_it_refuses_what_is_not_safe_and_writes_nothing(tenant, fields, code):
    before = list(PeriodicTask.objects.values_list("name", "enabled", "interval", "crontab"))
    with pytest.raises(ApiError) as refused:
        job_schedule_update(actor="x", **fields)
    assert refused.value.error_code == code
    assert (
        list(PeriodicTask.objects.values_list("name", "enabled", "interval", "crontab")) == before
    )
    assert not Event.objects.filter(kind="job_schedule.updated").exists()


def test_only_an_operator_opens_the_schedule(tenant, tenant_admin_client, reviewer_client):
    assert tenant_admin_client.get("/jobs/schedule/").status_code == 403
    assert reviewer_client.get("/jobs/schedule/").status_code == 403
    jobs = tenant_admin_client.get("/jobs/")
    assertNotContains(jobs, "Edit in the admin")
    assertNotContains(jobs, "/jobs/schedule/")
    assertNotContains(jobs, 'href="/admin/')
    assert operator_client(tenant, perm=False).get("/jobs/schedule/").status_code == 403


def test_an_operator_saves_a_schedule(tenant):
    client = operator_client(tenant)
    assertContains(client.get("/jobs/"), "Edit in the admin")
    page = client.get("/jobs/schedule/")
    assertContains(page, 'id="schedule-memorydecay"')

    answer = client.post(
        "/jobs/schedule/", {"name": "memory.decay", "every_minutes": "45"}, follow=True
    )
    assertContains(answer, "memory.decay: saved")
    task = PeriodicTask.objects.get(name="memory.decay")
    assert (task.enabled, task.interval.every) == (False, 45)  # unticked: paused
    assert Event.objects.get(tenant=tenant, kind="job_schedule.updated").actor == "human:ops"

    refused = client.post(
        "/jobs/schedule/", {"name": "ledger.checkpoint", "every_minutes": "5"}, follow=True
    )
    assertContains(refused, "cannot be paused here")
    assertContains(
        client.post("/jobs/schedule/", {"name": "x", "every_minutes": "a"}, follow=True),
        "Every (minutes)",
    )
