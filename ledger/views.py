"""The ledger's pages: the ledger browser and the jobs page (server-rendered, HTMX partials)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from config.api import ApiError
from config.views import HtmxHttpRequest
from config.web import membership_required, partial_wanted, role_required, tenant_membership
from ledger.anchors import checkpoint_latest
from ledger.forms import EventFilterForm, JobScheduleForm
from ledger.job_schedules import JOBS_ALWAYS_ON, job_schedule_editable_by, job_schedule_update
from ledger.jobs import (
    CHECKPOINT_JOB,
    JOBS,
    Daily,
    JobStatus,
    chain_check_status,
    job_periodic_tasks,
    job_statuses,
)
from ledger.models import Agent, ChainVerification, Event, Role, Tenant
from ledger.selectors import (
    EVENT_PAYLOAD_PREVIEW_CHARS,
    chain_verification_latest,
    event_kinds,
    events_browse,
    tenant_overview,
)
from ledger.services import actor_for_user
from ledger.verification import chain_verify_now

# The one-line payload beside each event; the whole (bounded) payload is one click away.
PAYLOAD_SUMMARY_CHARS = 160


@dataclass(frozen=True)
class EventRow:
    event: Event
    summary: str
    pretty: str
    truncated: bool
    # Query strings of the row's filter links: the current filters with this one added.
    actor_query: str
    kind_query: str
    run_query: str


def _same_moment(value: Any, moment: datetime) -> bool:
    """A payload value that is the event's own time (services stamp "at": now), to the second."""
    if not isinstance(value, str) or len(value) < 19 or value[4:5] != "-":
        return False
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return abs((parsed - moment).total_seconds()) < 1


def _summary(event: Event) -> str:
    """The payload on one line, without a time the row's Time column already shows."""
    payload = event.payload
    if isinstance(payload, dict):
        payload = {k: v for k, v in payload.items() if not _same_moment(v, event.created_at)}
    compact = json.dumps(payload, ensure_ascii=False, separators=(", ", ": "))
    cut = len(compact) > PAYLOAD_SUMMARY_CHARS
    return compact[:PAYLOAD_SUMMARY_CHARS] + ("…" if cut else "")


def _event_row(event: Event, filters: dict[str, str]) -> EventRow:
    # Agent-written text: the template escapes both renderings like any other string.
    pretty = json.dumps(event.payload, ensure_ascii=False, indent=2)
    return EventRow(
        event=event,
        summary=_summary(event),
        pretty=pretty[:EVENT_PAYLOAD_PREVIEW_CHARS],
        truncated=len(pretty) > EVENT_PAYLOAD_PREVIEW_CHARS,
        actor_query=urlencode({**filters, "actor": event.actor}),
        kind_query=urlencode({**filters, "kind": event.kind}),
        run_query=urlencode({**filters, "run": event.run_id}),
    )


@membership_required
@require_GET
def ledger_browser(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    form = EventFilterForm(request.GET)
    if not form.is_valid():
        context: dict[str, Any] = {"form": form, "rows": []}
        if partial_wanted(request, "events-section"):
            context |= _filter_choices(tenant)
            return render(request, "ledger/partials/events_section.html", context, status=400)
        if partial_wanted(request):
            return render(request, "ledger/partials/events.html", context, status=400)
        context |= {**_chain_context(request), **_filter_choices(tenant)}
        return render(request, "ledger/browser.html", context, status=400)
    filters = form.filters()
    page = events_browse(tenant=tenant, filters=filters, before_seq=form.cleaned_data["before_seq"])
    # The query string of the next page: these filters with the cursor moved on. Only the
    # form's own fields are carried (into row links too), never a stray parameter.
    query = {k: str(v) for k, v in request.GET.items() if k in FILTER_FIELDS and v}
    next_query = (
        urlencode({**query, "before_seq": page.next_before_seq}) if page.next_before_seq else ""
    )
    context = {
        "form": form,
        "rows": [_event_row(event, query) for event in page.events],
        "next_query": next_query,
        "filtered": bool(query),
        # A window whose From is not before its Before holds no moment: say so, not just "no
        # event matches" (a valid query, so a 200 that HTMX swaps in like any other).
        "empty_window": filters.since is not None
        and filters.before is not None
        and filters.since >= filters.before,
    }
    if partial_wanted(request) and form.cleaned_data["before_seq"]:
        return render(request, "ledger/partials/event_rows.html", context | {"appended": True})
    if partial_wanted(request, "events-section"):
        # A row's filter link: the form shows the filter it added, and the rows follow.
        context |= _filter_choices(tenant)
        return render(request, "ledger/partials/events_section.html", context)
    if partial_wanted(request):
        return render(request, "ledger/partials/events.html", context)
    context |= _filter_choices(tenant)
    context |= {
        **_chain_context(request),
        "overview": tenant_overview(tenant=tenant, agent_limit=0),
    }
    return render(request, "ledger/browser.html", context)


FILTER_FIELDS = ("actor", "kind", "run", "since", "before")


def _filter_choices(tenant: Tenant) -> dict[str, Any]:
    return {
        "actors": Agent.objects.for_tenant(tenant)
        .order_by("name")
        .values_list("name", flat=True)[:500],
        "kinds": event_kinds(tenant=tenant),
    }


def _chain_context(request: HtmxHttpRequest, **extra: Any) -> dict[str, Any]:
    """The hash chain panel: the nightly job's verdict, the checkpoint job's, the latest
    on-demand check, and whichever is newest sets the badge."""
    membership = tenant_membership(request)
    tenant = membership.tenant
    chain = chain_check_status(tenant=tenant)
    anchor_check = chain_check_status(tenant=tenant, job=CHECKPOINT_JOB)
    on_demand = chain_verification_latest(tenant=tenant)
    newer = on_demand is not None and (
        chain.checked_at is None or on_demand.checked_at > chain.checked_at
    )
    state = chain.state
    if on_demand is not None and newer:
        state = "verified" if on_demand.ok else "broken"
    return {
        "chain": chain,
        "anchor_check": anchor_check,
        # Either check finding the chain broken makes the panel say so.
        "chain_state": "broken" if anchor_check.state == "broken" else state,
        "checkpoint": checkpoint_latest(tenant_id=tenant.pk),
        "on_demand": on_demand,
        "on_demand_newer": newer,
        "can_verify": membership.role == Role.ADMIN,
        **extra,
    }


@require_POST
@role_required(Role.ADMIN)
def ledger_verify(request: HtmxHttpRequest) -> HttpResponse:
    """Walk this tenant's chain now (admins); the panel shows the outcome in place."""
    chain_verify_now(
        tenant=tenant_membership(request).tenant,
        source=ChainVerification.Source.PAGE,
        checked_by=actor_for_user(request.user),  # type: ignore[arg-type]
    )
    if partial_wanted(request):
        return render(request, "ledger/partials/chain_status.html", _chain_context(request))
    return redirect("ledger:browser")


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
        # Schedules are global (one decay job serves every tenant): only an operator changes
        # them (ledger.job_schedules says why); the Django admin lets staff in only.
        "can_edit_schedules": job_schedule_editable_by(
            user=request.user,  # type: ignore[arg-type]
            role=membership.role,
        ),
    }
    template = "ledger/partials/jobs_table.html" if partial_wanted(request) else "ledger/jobs.html"
    return render(request, template, context)


def _schedule_rows() -> list[dict[str, Any]]:
    tasks = job_periodic_tasks()
    rows = []
    for name, spec in JOBS.items():
        task = tasks.get(name)
        if task is None:
            continue
        rows.append(
            {
                "name": name,
                "description": spec.description,
                "daily": isinstance(spec.schedule, Daily),
                "enabled": task.enabled,
                "every_minutes": task.interval.every if task.interval else None,
                "daily_at": (
                    f"{int(task.crontab.hour):02d}:{int(task.crontab.minute):02d}"
                    if task.crontab
                    and task.crontab.hour.isdigit()
                    and task.crontab.minute.isdigit()
                    else ""
                ),
                "always_on": name in JOBS_ALWAYS_ON,
            }
        )
    return rows


@role_required(Role.ADMIN)
def jobs_schedule(request: HtmxHttpRequest) -> HttpResponse:
    """Read and change the jobs' schedule in the app: operators only (ledger.job_schedules)."""
    if not job_schedule_editable_by(user=request.user, role=Role.ADMIN):  # type: ignore[arg-type]
        raise PermissionDenied("Schedules serve every tenant: only an operator changes them.")
    if request.method == "POST":
        form = JobScheduleForm(request.POST)
        if not form.is_valid():
            messages.error(request, form.problem())
            return redirect("jobs:schedule")
        data = form.cleaned_data
        at = data["daily_at"]
        try:
            changes = job_schedule_update(
                name=data["name"],
                actor=actor_for_user(request.user),  # type: ignore[arg-type]
                enabled=data["enabled"],
                every_minutes=data["every_minutes"],
                daily_at=(at.hour, at.minute) if at else None,
            )
        except ApiError as refused:
            messages.error(request, str(refused.detail))
            return redirect("jobs:schedule")
        if changes:
            messages.success(request, f"{data['name']}: saved; beat picks it up within seconds.")
        else:
            messages.info(request, f"{data['name']}: nothing changed.")
        return redirect("jobs:schedule")
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "POST"])
    return render(request, "ledger/job_schedule.html", {"rows": _schedule_rows()})
