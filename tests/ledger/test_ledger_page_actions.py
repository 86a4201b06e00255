"""The ledger page's chain panel with on-demand verification, row filter links that add to the
filters, payload summaries, and the time window that cannot match."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from unittest import mock

import pytest
from django.core.management import call_command
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from ledger.models import ChainVerification, Event
from ledger.services import EventDraft, event_append, events_append
from tests.tampering import tamper

pytestmark = pytest.mark.django_db

HTMX_EVENTS = {"HX-Request": "true", "HX-Target": "events"}


def test_an_admin_verifies_now_and_the_panel_shows_it(tenant, tenant_admin_client):
    events_append(tenant=tenant, drafts=[EventDraft(kind="a.b", actor="system")] * 3)
    page = tenant_admin_client.get("/ledger/")
    assertContains(page, "Verify now")
    assertContains(page, "Not checked yet")

    panel = tenant_admin_client.post(
        "/ledger/verify/", headers={"HX-Request": "true", "HX-Target": "chain-status"}
    )

    check = ChainVerification.objects.get(tenant=tenant)
    assert check.ok
    assert check.source == "page"
    assert check.checked_by.startswith("human:admin-")
    head = Event.objects.filter(tenant=tenant).order_by("-seq").first()
    assert check.head_seq == head.seq == check.events_checked
    body = panel.content.decode()
    assert body.lstrip().startswith('<section class="card chain-status chain-status--verified"')
    assert f"every link of the {head.seq} events up to #{head.seq} holds" in body
    assert Event.objects.filter(tenant=tenant).count() == head.seq  # a check appends nothing


def test_reviewers_cannot_verify_now(tenant, reviewer_client):
    assertNotContains(reviewer_client.get("/ledger/"), "Verify now")
    assert reviewer_client.post("/ledger/verify/").status_code == 403
    assert reviewer_client.get("/ledger/verify/").status_code == 405
    assert not ChainVerification.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_broken_chain_found_now_turns_the_panel_broken(tenant, tenant_admin_client):
    events_append(tenant=tenant, drafts=[EventDraft(kind="a.b", actor="system")] * 3)
    tamper(
        "UPDATE ledger_event SET payload = '{\"forged\": 1}' WHERE tenant_id = %s AND seq = 2",
        [tenant.pk],
    )
    tenant_admin_client.post("/ledger/verify/")
    page = tenant_admin_client.get("/ledger/")
    assertContains(page, "chain-status--broken")
    assertContains(page, "the chain is broken at event #2")


def test_the_panel_shows_the_last_verify_ledger_run(tenant, reviewer_client):
    event_append(tenant=tenant, kind="a.b", actor="system")
    call_command("verify_ledger", "--tenant", tenant.slug)
    page = reviewer_client.get("/ledger/")
    assertContains(page, "<code>manage.py verify_ledger</code> checked it at")
    assertContains(page, "chain-status--verified")


def test_row_links_add_to_the_current_filters(tenant, reviewer_client):
    events_append(
        tenant=tenant,
        drafts=[EventDraft(kind="agent.spoke", actor="system", run_id="r1")] * 2,
    )
    page = reviewer_client.get("/ledger/", {"run": "r1", "junk": "x"}).content.decode()
    kind_link = re.search(r'class="tag" href="\?([^"]+)"', page).group(1)
    assert kind_link == "run=r1&amp;kind=agent.spoke"

    swapped = reviewer_client.get(
        "/ledger/?run=r1&kind=agent.spoke",
        headers={"HX-Request": "true", "HX-Target": "events-section"},
    )
    body = swapped.content.decode()
    assert body.lstrip().startswith('<div id="events-section">')
    assert 'name="kind" id="id_kind" value="agent.spoke"' in body
    assert body.count('class="event-row"') == 2


def test_summaries_leave_out_the_time_of_the_time_column(tenant, reviewer_client):
    now = timezone.now()
    with mock.patch("ledger.services.timezone.now", return_value=now):
        event_append(
            tenant=tenant,
            kind="a.b",
            actor="system",
            payload={
                "at": now.isoformat(),
                "deadline": (now + timedelta(days=1)).isoformat(),
                "text": "kept",
            },
        )
    page = reviewer_client.get("/ledger/").content.decode()
    found = re.search(r'<summary><span class="mono">([^<]*)</span>', page).group(1)
    summary = html.unescape(found)
    assert '"at"' not in summary
    assert '"deadline"' in summary
    assert "kept" in summary
    assert f'"at": "{now.isoformat()}"' in html.unescape(page)  # the whole payload keeps it


def test_a_from_after_before_window_says_why_nothing_matches(tenant, reviewer_client):
    event_append(tenant=tenant, kind="a.b", actor="system")
    answer = reviewer_client.get(
        "/ledger/", {"since": "2026-05-02T10:00", "before": "2026-05-01T10:00"}, headers=HTMX_EVENTS
    )
    assertContains(answer, "No event can match: the window runs from <strong>From</strong>")
    assertContains(answer, "(2026-05-02 10:00) up to, not including, <strong>Before</strong>")
    assertNotContains(answer, "event-row")
