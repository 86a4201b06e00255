"""The ledger browser and the jobs page: filters, keyset paging, chain status, roles, escaping."""

from __future__ import annotations

import re
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains, assertRedirects

from ledger.demo import demo_first_job_runs_queue
from ledger.jobs import CHAIN_VERIFY_JOB, JOBS, job_schedules_ensure
from ledger.models import Event, JobRun
from ledger.selectors import EventFilters, event_first_seq_at, event_kinds, events_browse
from ledger.services import EventDraft, events_append

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def append(tenant, count, *, kind="agent.spoke", actor="Creator1", run_id="", payload=None):
    return events_append(
        tenant=tenant,
        drafts=[
            EventDraft(kind=kind, actor=actor, run_id=run_id, payload=payload or {"n": i})
            for i in range(count)
        ],
    )


def append_at(tenant, moment, count, **fields):
    # Events are append-only (a trigger refuses UPDATE), so the clock is set as they are made.
    with mock.patch("ledger.services.timezone.now", return_value=moment):
        return append(tenant, count, **fields)


def seqs(response) -> list[int]:
    return [int(s) for s in re.findall(r'data-seq="(\d+)"', response.content.decode())]


# --- access -----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/ledger/", "/jobs/"])
def test_it_sends_anonymous_visitors_to_the_login_page(client, url):
    assertRedirects(client.get(url), f"/login/?next={url}", fetch_redirect_response=False)


@pytest.mark.parametrize("url", ["/ledger/", "/jobs/"])
def test_it_refuses_a_person_without_a_seat(client_as, url):
    assert client_as(None).get(url).status_code == 403


@pytest.mark.parametrize("url", ["/ledger/", "/jobs/"])
def test_it_refuses_writes(reviewer_client, url):
    assert reviewer_client.post(url).status_code == 405


# --- ledger browser ---------------------------------------------------------------------------


def test_it_lists_the_tenants_events_newest_first(tenant, other_tenant, reviewer_client):
    append(tenant, 3, run_id="run-a")
    append(other_tenant, 2, actor="Intruder", payload={"secret": "globex plans"})

    response = reviewer_client.get("/ledger/")

    assert response.status_code == 200
    mine = list(Event.objects.filter(tenant=tenant).order_by("-seq").values_list("seq", flat=True))
    assert seqs(response) == mine
    assertNotContains(response, "globex plans")
    assertNotContains(response, "Intruder")
    assertContains(response, 'aria-current="page"')


def test_agent_written_text_is_escaped(tenant, reviewer_client):
    append(
        tenant, 1, actor="<script>alert(1)</script>", payload={"text": "<script>alert(2)</script>"}
    )

    response = reviewer_client.get("/ledger/")

    assertNotContains(response, "<script>alert")
    assertContains(response, "&lt;script&gt;alert(1)&lt;/script&gt;")
    assertContains(response, "&lt;script&gt;alert(2)&lt;/script&gt;")


def test_it_filters_by_actor_kind_and_run(tenant, reviewer_client):
    append(tenant, 2, kind="agent.spoke", actor="Creator1", run_id="r1")
    wanted = append(tenant, 2, kind="clue.found", actor="Reviewer1", run_id="r2")
    append(tenant, 2, kind="clue.found", actor="Creator1", run_id="r2")

    response = reviewer_client.get(
        "/ledger/", {"actor": "Reviewer1", "kind": "clue.found", "run": "r2"}
    )

    assert seqs(response) == [e.seq for e in reversed(wanted)]


def test_it_filters_by_time(tenant, reviewer_client):
    # Later than the tenant's own first events: created_at never decreases along a chain.
    now = timezone.now()
    early = append_at(tenant, now + timedelta(hours=1), 2)
    late = append_at(tenant, now + timedelta(days=3), 2)
    middle = (now + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")

    assert seqs(reviewer_client.get("/ledger/", {"since": middle})) == [
        e.seq for e in reversed(late)
    ]
    before = seqs(reviewer_client.get("/ledger/", {"before": middle}))
    assert before[:2] == [e.seq for e in reversed(early)]
    assert not set(before) & {e.seq for e in late}


def test_time_bounds_become_seqs_by_binary_search(tenant):
    start = timezone.now() + timedelta(hours=1)
    # Non-decreasing, with runs of equal timestamps as a batch append gives.
    for i in range(37):
        append_at(tenant, start + timedelta(minutes=i // 3), 1)
    head = Event.objects.filter(tenant=tenant).order_by("-seq").first().seq

    for minutes in range(-1, 14):
        moment = start + timedelta(minutes=minutes, seconds=minutes % 2 * 30)
        first = Event.objects.filter(tenant=tenant, created_at__gte=moment).order_by("seq").first()
        expected = first.seq if first else head + 1
        assert event_first_seq_at(tenant=tenant, moment=moment) == expected, minutes
    assert event_first_seq_at(tenant=tenant, moment=start - timedelta(days=1)) == 1
    assert event_first_seq_at(tenant=tenant, moment=start + timedelta(days=1)) == head + 1


def test_time_bounds_past_the_end_select_nothing(other_tenant):
    later = timezone.now() + timedelta(days=1)
    head = Event.objects.filter(tenant=other_tenant).count()

    assert event_first_seq_at(tenant=other_tenant, moment=later) == head + 1
    assert events_browse(tenant=other_tenant, filters=EventFilters(since=later)).events == []


def test_load_more_pages_by_seq_without_gaps_or_repeats(tenant, reviewer_client):
    made = [e.seq for e in reversed(append(tenant, 120, kind="k"))]
    response = reviewer_client.get("/ledger/", {"kind": "k"})
    assert seqs(response) == made[:50]
    # The load-more link (row filter links carry no cursor).
    more = re.search(r'hx-get="\?([^"]*before_seq[^"]*)"', response.content.decode()).group(1)
    assert f"before_seq={made[49]}" in more
    assert "kind=k" in more

    page2 = reviewer_client.get(f"/ledger/?{more.replace('&amp;', '&')}", headers=HTMX)

    body = page2.content.decode()
    assert "<html" not in body
    assert "<table" not in body
    assert seqs(page2) == made[50:100]
    # Keyboard users land on the first new row, where the link they pressed was.
    assert f'data-seq="{made[50]}" tabindex="-1" autofocus>' in body
    assert body.count("autofocus") == 1
    assert "autofocus" not in response.content.decode()
    more = re.search(r'hx-get="\?([^"]*before_seq[^"]*)"', body).group(1).replace("&amp;", "&")
    page3 = reviewer_client.get(f"/ledger/?{more}", headers=HTMX)
    assert seqs(page3) == made[100:]
    assertNotContains(page3, "Load older events")


def test_the_filter_partial_swaps_the_table_only(tenant, reviewer_client):
    append(tenant, 2, kind="clue.found")

    response = reviewer_client.get("/ledger/", {"kind": "clue.found"}, headers=HTMX)

    body = response.content.decode()
    assert body.lstrip().startswith("{#") is False
    assert '<div id="events"' in body
    assert "<html" not in body
    assert "Hash chain" not in body
    assert len(seqs(response)) == 2


def test_a_bad_cursor_or_time_is_a_400(reviewer_client):
    assert reviewer_client.get("/ledger/", {"before_seq": "abc"}).status_code == 400
    response = reviewer_client.get("/ledger/", {"since": "yesterday"}, headers=HTMX)
    assert response.status_code == 400
    assertContains(response, "Enter a valid date/time", status_code=400)


def test_the_page_runs_a_bounded_number_of_queries(
    tenant, make_agent, reviewer_client, django_assert_max_num_queries
):
    for i in range(30):
        make_agent(tenant, name=f"Agent{i}")
    append(tenant, 300, kind="a")
    append(tenant, 300, kind="b")

    # 15: the 15th reads the latest on-demand chain check.
    with django_assert_max_num_queries(15):
        response = reviewer_client.get(
            "/ledger/", {"kind": "a", "since": "2000-01-01T00:00", "before": "2999-01-01T00:00"}
        )
    assert len(seqs(response)) == 50
    with django_assert_max_num_queries(8):
        reviewer_client.get("/ledger/", {"kind": "a", "before_seq": "200"}, headers=HTMX)


@pytest.mark.parametrize(
    "filters",
    [
        EventFilters(),
        EventFilters(kind="kind-3"),
        EventFilters(actor="actor-5"),
        EventFilters(run_id="run-7"),
        EventFilters(kind="kind-3", actor="actor-5"),
    ],
)
def test_a_page_walks_an_index_in_seq_order(tenant, other_tenant, filters):
    """No sort and no sequential scan: a page reads its rows off an index backwards, so its cost
    does not grow with the ledger (keyset on seq, no OFFSET).

    Every filter keeps several pages of rows, the two-key one included (one event in ten is
    kind-3 by actor-5): with fewer than a page the planner may rightly read them all and sort,
    and whether it did depended on what earlier tests had left in the table."""
    for owner in (tenant, other_tenant):
        drafts = []
        for i in range(3000):
            drafts.append(
                EventDraft(kind=f"kind-{i % 10}", actor=f"actor-{i % 11}", run_id=f"run-{i % 13}")
            )
            if i % 10 == 0:
                drafts.append(EventDraft(kind="kind-3", actor="actor-5", run_id=f"run-{i % 13}"))
        events_append(tenant=owner, drafts=drafts)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_event")
    with CaptureQueriesContext(connection) as captured:
        events_browse(tenant=tenant, filters=filters, before_seq=2500)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {captured.captured_queries[-1]['sql']}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan Backward" in plan, plan
    assert "Sort" not in plan, plan
    assert "Seq Scan" not in plan, plan


def test_kinds_are_listed_once_each(tenant, other_tenant):
    append(tenant, 3, kind="b.kind")
    append(tenant, 2, kind="a.kind")
    append(other_tenant, 1, kind="z.other")

    assert event_kinds(tenant=tenant) == sorted(
        {"a.kind", "b.kind", *Event.objects.filter(tenant=tenant).values_list("kind", flat=True)}
    )
    assert "z.other" not in event_kinds(tenant=tenant)


# --- chain status -----------------------------------------------------------------------------


def chain_run(status, **details):
    now = timezone.now()
    return JobRun.objects.create(
        job=CHAIN_VERIFY_JOB,
        status=status,
        started_at=now,
        finished_at=now + timedelta(seconds=2),
        details=details,
        error="1 hash chain(s) broken" if status == JobRun.Status.FAILED else "",
    )


def test_the_chain_is_unchecked_before_any_verification(reviewer_client):
    assertContains(reviewer_client.get("/ledger/"), "Not checked yet")


def test_it_shows_when_the_chain_was_last_verified(reviewer_client):
    run = chain_run(JobRun.Status.SUCCEEDED, done=True)

    response = reviewer_client.get("/ledger/")

    assertContains(response, "Verified")
    assertContains(response, f'Checked <time datetime="{run.finished_at.isoformat()}')


def test_it_shows_this_tenants_broken_link_and_nobody_elses(tenant, other_tenant, client_as):
    chain_run(
        JobRun.Status.FAILED,
        done=True,
        broken=[{"tenant_id": tenant.pk, "seq": 7, "reason": "contents do not match"}],
    )

    assertContains(client_as(tenant).get("/ledger/"), "broken at event #7")
    other = client_as(other_tenant).get("/ledger/")
    assertContains(other, "Verified")
    assertNotContains(other, "#7")


def test_an_unfinished_verification_does_not_count(reviewer_client):
    chain_run(JobRun.Status.SUCCEEDED, done=False, after_tenant=1)

    assertContains(reviewer_client.get("/ledger/"), "Not checked yet")


# --- jobs -------------------------------------------------------------------------------------


def test_the_jobs_page_shows_each_job_with_its_last_runs(reviewer_client):
    now = timezone.now()
    JobRun.objects.create(
        job="memory.decay",
        status=JobRun.Status.SUCCEEDED,
        started_at=now - timedelta(minutes=5),
        finished_at=now,
        rows_touched=12345,
        duration_seconds=4.25,
    )
    JobRun.objects.create(
        job="memory.ttl",
        status=JobRun.Status.FAILED,
        started_at=now,
        finished_at=now,
        error="<script>OperationalError</script>",
    )

    response = reviewer_client.get("/jobs/")

    for name in JOBS:
        assertContains(response, f">{name}</h2>")
    assertContains(response, "12345")
    assertContains(response, "4.25 s")
    assertContains(response, "&lt;script&gt;OperationalError&lt;/script&gt;")
    assertContains(response, "Next run")


def test_schedules_read_plainly(reviewer_client):
    job_schedules_ensure()

    response = reviewer_client.get("/jobs/")

    assertContains(response, "<dd>every 5 minutes</dd>")
    assertContains(response, "<dd>cron 0 3 * * * UTC</dd>")


def test_no_schedule_link_leads_a_tenant_admin_to_a_refusal(reviewer_client, tenant_admin_client):
    # The admin lets staff in only; operators' links: tests/ledger/test_job_schedules.py.
    assertNotContains(reviewer_client.get("/jobs/"), "Edit in the admin")
    assertNotContains(tenant_admin_client.get("/jobs/"), "Edit in the admin")


def test_the_jobs_partial_refreshes_alone(reviewer_client, django_assert_max_num_queries):
    with django_assert_max_num_queries(len(JOBS) + 6):
        response = reviewer_client.get("/jobs/", headers=HTMX)

    body = response.content.decode()
    assert '<div id="jobs"' in body
    assert 'hx-trigger="every 30s"' in body
    assert "<html" not in body


def test_the_schedule_page_stays_with_staff(reviewer_client):
    # The link goes to Django's admin, which only staff may use.
    response = reviewer_client.get("/admin/django_celery_beat/periodictask/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_no_page_has_inline_script_or_style(tenant, reviewer_client):
    append(tenant, 60)
    with mock.patch("ledger.views.job_statuses", return_value=[]):
        pages = [reviewer_client.get(url) for url in ("/ledger/", "/jobs/")]
    for response in pages:
        body = response.content.decode()
        assert " style=" not in body
        assert " on" + "click=" not in body
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body), body


def test_up_demo_queues_each_job_that_never_ran_once():
    JobRun.objects.create(
        job="memory.decay", status=JobRun.Status.SUCCEEDED, started_at=timezone.now()
    )

    with mock.patch("config.celery.app.send_task") as send:
        queued = demo_first_job_runs_queue()

    tasks = [call.args[0] for call in send.call_args_list]
    assert queued == len(JOBS) - 1
    assert sorted(tasks) == sorted(s.task for n, s in JOBS.items() if n != "memory.decay")


@pytest.mark.parametrize("url", ["/ledger/", "/jobs/", "/memory/", "/memory/token-savings/"])
def test_pages_vary_on_htmx_and_restore_history_whole(reviewer_client, url):
    partial = reviewer_client.get(url, headers=HTMX)
    restore = reviewer_client.get(url, headers={**HTMX, "HX-History-Restore-Request": "true"})

    assert "HX-Request" in partial["Vary"]
    assert "<html" not in partial.content.decode()
    assert "<html" in restore.content.decode()


def test_a_person_without_a_seat_is_told_why(client_as):
    response = client_as(None).get("/ledger/")

    assert response.status_code == 403
    assertContains(response, "no seat in a tenant", status_code=403)
