"""The ledger's pages: the ledger browser and the jobs page (server-rendered, HTMX partials)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from config.views import HtmxHttpRequest
from config.web import membership_required, partial_wanted, tenant_membership
from ledger.anchors import checkpoint_latest
from ledger.forms import EventFilterForm
from ledger.jobs import CHECKPOINT_JOB, JobStatus, chain_check_status, job_statuses
from ledger.models import Agent, Event, Role
from ledger.selectors import (
    EVENT_PAYLOAD_PREVIEW_CHARS,
    event_kinds,
    events_browse,
    tenant_overview,
)

# The one-line payload beside each event; the whole (bounded) payload is one click away.
PAYLOAD_SUMMARY_CHARS = 160


@dataclass(frozen=True)
class EventRow:
    event: Event
    summary: str
    pretty: str
    truncated: bool


def _event_row(event: Event) -> EventRow:
    # Agent-written text: the template escapes both renderings like any other string.
    compact = json.dumps(event.payload, ensure_ascii=False, separators=(", ", ": "))
    pretty = json.dumps(event.payload, ensure_ascii=False, indent=2)
    cut = len(compact) > PAYLOAD_SUMMARY_CHARS
    return EventRow(
        event=event,
        summary=compact[:PAYLOAD_SUMMARY_CHARS] + ("…" if cut else ""),
        pretty=pretty[:EVENT_PAYLOAD_PREVIEW_CHARS],
        truncated=len(pretty) > EVENT_PAYLOAD_PREVIEW_CHARS,
    )


@membership_required
@require_GET
def ledger_browser(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    form = EventFilterForm(request.GET)
    if not form.is_valid():
        partial = partial_wanted(request)
        template = "ledger/partials/events.html" if partial else "ledger/browser.html"
        return render(request, template, {"form": form, "rows": []}, status=400)
    page = events_browse(
        tenant=tenant, filters=form.filters(), before_seq=form.cleaned_data["before_seq"]
    )
    # The query string of the next page: these filters with the cursor moved on.
    query = {k: v for k, v in request.GET.items() if k != "before_seq" and v}
    next_query = (
        urlencode({**query, "before_seq": page.next_before_seq}) if page.next_before_seq else ""
    )
    context: dict[str, Any] = {
        "form": form,
        "rows": [_event_row(event) for event in page.events],
        "next_query": next_query,
        "filtered": bool(query),
    }
    if partial_wanted(request) and form.cleaned_data["before_seq"]:
        return render(request, "ledger/partials/event_rows.html", context | {"appended": True})
    if partial_wanted(request):
        return render(request, "ledger/partials/events.html", context)
    chain = chain_check_status(tenant=tenant)
    anchor_check = chain_check_status(tenant=tenant, job=CHECKPOINT_JOB)
    context |= {
        "chain": chain,
        "anchor_check": anchor_check,
        # Either check finding the chain broken makes the panel say so.
        "chain_state": "broken" if anchor_check.state == "broken" else chain.state,
        "checkpoint": checkpoint_latest(tenant_id=tenant.pk),
        "overview": tenant_overview(tenant=tenant, agent_limit=0),
        "actors": Agent.objects.for_tenant(tenant)
        .order_by("name")
        .values_list("name", flat=True)[:500],
        "kinds": event_kinds(tenant=tenant),
    }
    return render(request, "ledger/browser.html", context)


def _readable_schedule(status: JobStatus) -> JobStatus:
    # django-celery-beat writes a crontab as "0 3 * * * (m/h/dM/MY/d) UTC"; the legend is noise.
    schedule = status.schedule.replace(" (m/h/dM/MY/d)", "")
    return replace(status, schedule=f"cron {schedule}" if "*" in schedule else schedule)


@membership_required
@require_GET
def jobs_status(request: HtmxHttpRequest) -> HttpResponse:
    membership = tenant_membership(request)
    context = {
        "jobs": [_readable_schedule(status) for status in job_statuses()],
        # Schedules are global (one decay job serves every tenant): admins edit them in the
        # Django admin; the page only links there.
        "can_edit_schedules": membership.role == Role.ADMIN,
    }
    template = "ledger/partials/jobs_table.html" if partial_wanted(request) else "ledger/jobs.html"
    return render(request, template, context)
