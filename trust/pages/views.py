"""The trust pages: overview, one agent's trust, and the review queue (SPEC 10, issue 8).

One URL per page; an HTMX request renders only the partial it targets (the overview's table, a
page of an agent's dissents or overrides, the waiting overrides), and the review queue's actions
answer with the row they changed. Every write goes through trust.rounds.services /
trust.governance.services, so it is one transaction with its ledger event, in the reviewer's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from config.api import ApiError
from config.routers import lag_tolerant
from config.views import HtmxHttpRequest
from config.web import page_or_partial, partial_wanted, role_required, tenant_membership
from ledger.models import Agent, Role
from ledger.services import actor_for_user
from trust.governance import selectors as governance_selectors
from trust.governance import services as governance
from trust.governance.models import GamingFlag, RubricProposal
from trust.interchange import selectors as interchange
from trust.pages.forms import (
    FlagReviewForm,
    OverrideNoteForm,
    OverviewFilterForm,
    ProposalDecisionForm,
)
from trust.pages.rows import override_outcome_rows, override_rows_shown
from trust.pages.words import score_change_words
from trust.rounds import overrides
from trust.rounds import selectors as round_selectors
from trust.rounds.models import Override
from trust.scores import selectors as score_selectors

AGENTS_PER_PAGE = 25
EVIDENCE_PER_PAGE = 20
WAITING_PER_PAGE = 20
SPARKLINE_WIDTH, SPARKLINE_HEIGHT = 100, 24
SPARKLINE_MIN_SPAN = 0.1
# The overview's sortable columns: (label, sort key, first direction: the interesting end first).
OVERVIEW_COLUMNS = [
    ("Agent", "name", ""),
    ("Trust", "trust", "-"),
    ("Open flags", "flags", "-"),
    ("Impact rate", "impact", "-"),
    ("Regret rate", "regret", "-"),
    ("Rounds", "rounds", "-"),
]


def _actor(request: HtmxHttpRequest) -> str:
    # "human:<username>", as everywhere in the ledger: a bare username could be an agent's name.
    return actor_for_user(request.user)  # type: ignore[arg-type]


def _pager_links(request: HtmxHttpRequest, page: Page[Any], param: str) -> dict[str, str]:
    """The query strings of the pages before and after ``page`` of the list paged by
    ``param``, keeping the rest of the request's query (filters, other lists' pages)."""

    def link(number: int) -> str:
        query = request.GET.copy()
        query[param] = str(number)
        return f"?{query.urlencode()}"

    return {
        "previous": link(page.previous_page_number()) if page.has_previous() else "",
        "next": link(page.next_page_number()) if page.has_next() else "",
    }


def _sort_columns(current: str) -> dict[str, dict[str, str]]:
    """Per sortable column: the sort its header link asks for and its aria-sort state."""
    columns = {}
    for label, key, first in OVERVIEW_COLUMNS:
        state = "none"
        if current == key:
            state = "ascending"
        elif current == f"-{key}":
            state = "descending"
        following = {"ascending": f"-{key}", "descending": key}.get(state, f"{first}{key}")
        columns[key] = {"label": label, "next": following, "state": state}
    return columns


def _sparkline(scores: list[float]) -> str:
    """SVG polyline points for the scores, left to right. The vertical range is the series' own
    (at least SPARKLINE_MIN_SPAN wide), so a trend of a few hundredths still shows."""
    if not scores:
        return ""
    if len(scores) == 1:
        scores = scores * 2
    low, high = min(scores), max(scores)
    middle, span = (low + high) / 2, max(high - low, SPARKLINE_MIN_SPAN)
    bottom = middle - span / 2
    step = SPARKLINE_WIDTH / (len(scores) - 1)
    drawable = SPARKLINE_HEIGHT - 4  # 2 px of room above and below for the stroke
    return " ".join(
        f"{i * step:.1f},{2 + (1 - (score - bottom) / span) * drawable:.1f}"
        for i, score in enumerate(scores)
    )


# --- Trust overview ----------------------------------------------------------------------------


@require_GET
@role_required(Role.REVIEWER)
@lag_tolerant()
def overview(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    form = OverviewFilterForm(request.GET)
    filters = form.filters()
    now = timezone.now()
    agents = score_selectors.trust_overview_agents(tenant=tenant, now=now, **filters)  # type: ignore[arg-type]
    page = Paginator(agents, AGENTS_PER_PAGE).get_page(request.GET.get("page"))
    lines = score_selectors.trust_sparklines(agent_ids=[agent.pk for agent in page])
    rows = [
        {
            "agent": agent,
            "sparkline": _sparkline(lines.get(agent.pk, [])),
            "trend": lines[agent.pk][-1] - lines[agent.pk][0] if lines.get(agent.pk) else 0.0,
            "on_probation": score_selectors.agent_on_probation(agent=agent, now=now),
        }
        for agent in page
    ]
    context = {
        "form": form,
        "page": page,
        "page_links": _pager_links(request, page, "page"),
        "rows": rows,
        "sort": filters["sort"],
        "columns": _sort_columns(str(filters["sort"])),
        "window_days": settings.TRUST_WINDOW_DAYS,
        "nav_section": "trust",
    }
    return page_or_partial(
        request,
        page="trust/overview.html",
        partial="trust/partials/overview_table.html",
        context=context,
    )


# --- One agent ---------------------------------------------------------------------------------


def _agent_of(request: HtmxHttpRequest, pk: int) -> Agent:
    # Another tenant's agent is a plain 404, as in the API.
    return get_object_or_404(Agent, tenant=tenant_membership(request).tenant, pk=pk)


@require_GET
@role_required(Role.REVIEWER)
def agent_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    agent = _agent_of(request, pk)
    dissents = Paginator(round_selectors.agent_dissents(agent=agent), EVIDENCE_PER_PAGE).get_page(
        request.GET.get("dissents")
    )
    overrides = Paginator(round_selectors.agent_overrides(agent=agent), EVIDENCE_PER_PAGE).get_page(
        request.GET.get("overrides")
    )
    now = timezone.now()
    context: dict[str, Any] = {
        "agent": agent,
        "dissents": dissents,
        "dissent_links": _pager_links(request, dissents, "dissents"),
        "overrides": overrides,
        # Confirmed ones as the review queue and the review list show them.
        "override_rows": override_outcome_rows(
            overrides,
            confirmations=round_selectors.override_confirmations(
                tenant=agent.tenant, override_ids=[override.pk for override in overrides]
            ),
            now=now,
        ),
        "override_links": _pager_links(request, overrides, "overrides"),
        "nav_section": "trust",
        "now": now,
    }
    if partial_wanted(request, "dissents"):
        return render(request, "trust/partials/agent_dissents.html", context)
    if partial_wanted(request, "overrides"):
        return render(request, "trust/partials/agent_overrides.html", context)
    chart = score_selectors.trust_chart(agent=agent)
    context.update(
        breakdown=score_selectors.agent_trust_breakdown(agent=agent, now=now),
        chart=chart,
        chart_data={
            # Milliseconds since the epoch: the chart's time axis places each point at its moment.
            "times": [round(point.at.timestamp() * 1000) for point in chart],
            "scores": [round(point.score, 4) for point in chart],
            "reasons": [point.reason for point in chart],
            "changes": [None if p.change is None else round(p.change, 4) for p in chart],
        },
        changes=[
            {
                "at": point.at,
                "score": point.score,
                "change": point.change,
                "reason": point.reason,
                "words": score_change_words(point),
            }
            for point in reversed(chart[-15:])
        ],
        diversity=score_selectors.citation_diversity(agent=agent),
        stats=score_selectors.long_term_stats(agent=agent, now=now),
        flags=governance_selectors.agent_gaming_flags(agent=agent),
        on_probation=score_selectors.agent_on_probation(agent=agent, now=now),
        probation_rounds=settings.PROBATION_MIN_ROUNDS,
    )
    return render(request, "trust/agent.html", context)


@require_GET
@role_required(Role.REVIEWER)
def agent_export(request: HtmxHttpRequest, pk: int) -> JsonResponse:
    """The agent's interchange document (memory/<Agent>.json), as a download."""
    agent = _agent_of(request, pk)
    response = JsonResponse(interchange.agent_export(agent=agent), json_dumps_params={"indent": 2})
    # Agent names are the orchestrator's text: keep only safe characters in the header.
    filename = re.sub(r"[^A-Za-z0-9._-]+", "_", agent.name).strip("._") or f"agent-{agent.pk}"
    response["Content-Disposition"] = f'attachment; filename="{filename}.json"'
    return response


# --- Review queue ------------------------------------------------------------------------------


def _override_rows(
    request: HtmxHttpRequest, *groups: list[Override], now: datetime
) -> list[list[dict[str, Any]]]:
    """Each group of overrides as rows with their confirmations and, for the open ones, what
    marking them regretted would do to the agent's trust (one query each for all groups), with
    the strings the row template prints (trust.pages.rows)."""
    tenant = tenant_membership(request).tenant
    confirmed = round_selectors.override_confirmations(
        tenant=tenant, override_ids=[o.pk for group in groups for o in group]
    )
    previews = score_selectors.trust_if_regretted(
        tenant=tenant,
        overrides=[
            (o.pk, o.agent_id, o.occurred_at)
            for group in groups
            for o in group
            if o.reverted_at is None
        ],
    )
    return [
        override_rows_shown(group, confirmations=confirmed, previews=previews, now=now)
        for group in groups
    ]


@require_GET
@role_required(Role.REVIEWER)
def review_queue(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    now = timezone.now()
    waiting = Paginator(round_selectors.overrides_waiting(tenant=tenant, now=now), WAITING_PER_PAGE)
    waiting_page = waiting.get_page(request.GET.get("waiting"))
    context: dict[str, Any] = {
        "waiting": waiting_page,
        "waiting_links": _pager_links(request, waiting_page, "waiting"),
        "now": now,
        "nav_section": "review",
        "is_admin": Role.allows(tenant_membership(request).role, Role.ADMIN),
    }
    if partial_wanted(request, "waiting"):
        (context["waiting_rows"],) = _override_rows(request, list(waiting_page), now=now)
        return render(request, "trust/partials/waiting_overrides.html", context)
    context["waiting_rows"], context["recent_rows"] = _override_rows(
        request,
        list(waiting_page),
        round_selectors.overrides_recent(tenant=tenant, now=now),
        now=now,
    )
    context.update(
        flags=governance_selectors.gaming_flags_open(tenant=tenant),
        proposals=governance_selectors.rubric_proposals_pending(tenant=tenant),
        recent_days=round_selectors.REVIEW_RECENT_DAYS,
    )
    return render(request, "trust/review_queue.html", context)


def _answer(
    request: HtmxHttpRequest, template: str, context: dict[str, Any], error: str = ""
) -> HttpResponse:
    """The changed row for HTMX (swapped in place); otherwise back to the queue (POST, then
    redirect), with the error as a message."""
    if partial_wanted(request):
        return render(request, template, {**context, "error": error})
    if error:
        messages.error(request, error)
    return redirect("trust:review_queue")


def _override_of(request: HtmxHttpRequest, pk: int) -> Override:
    override: Override = get_object_or_404(
        round_selectors.overrides_for_review(tenant=tenant_membership(request).tenant), pk=pk
    )
    return override


def _override_answer(request: HtmxHttpRequest, override: Override, error: str) -> HttpResponse:
    override.refresh_from_db()
    now = timezone.now()
    ((row,),) = _override_rows(request, [override], now=now)
    return _answer(request, "trust/partials/override_row.html", {"row": row, "now": now}, error)


def _attempt(act: Callable[[], object]) -> str:
    """Run a service call; a refusal (409 already decided, 400 no longer applies) becomes the
    message the row shows, since the row is re-rendered from the database either way."""
    try:
        act()
    except ApiError as refused:
        return str(refused.detail)
    return ""


def _decision(form: forms.Form, invalid: str, act: Callable[[dict[str, Any]], object]) -> str:
    if not form.is_valid():
        return invalid
    return _attempt(lambda: act(form.cleaned_data))


@require_POST
@role_required(Role.REVIEWER)
def override_revert(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    override = _override_of(request, pk)
    actor = _actor(request)
    error = _decision(
        OverrideNoteForm(request.POST),
        NOTE_INVALID,
        lambda data: overrides.override_revert(
            override=override, reverted_by=actor, note=data["note"], actor=actor
        ),
    )
    return _override_answer(request, override, error)


@require_POST
@role_required(Role.REVIEWER)
def override_revert_withdraw(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    override = _override_of(request, pk)
    error = _decision(
        OverrideNoteForm(request.POST),
        NOTE_INVALID,
        lambda data: overrides.override_revert_withdraw(
            override=override, note=data["note"], actor=_actor(request)
        ),
    )
    return _override_answer(request, override, error)


NOTE_INVALID = "A note has at most 2,000 characters."


@require_POST
@role_required(Role.REVIEWER)
def override_confirm(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    override = _override_of(request, pk)
    error = _attempt(lambda: overrides.override_confirm(override=override, actor=_actor(request)))
    return _override_answer(request, override, error)


@require_POST
@role_required(Role.REVIEWER)
def flag_review(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    flag = get_object_or_404(
        GamingFlag.objects.select_related("agent", "tenant"),
        tenant=tenant_membership(request).tenant,
        pk=pk,
    )
    error = _decision(
        FlagReviewForm(request.POST),
        "Choose to clear or escalate the flag; a note has at most 2,000 characters.",
        lambda data: governance.gaming_flag_review(
            flag=flag, status=data["decision"], note=data["note"], actor=_actor(request)
        ),
    )
    flag.refresh_from_db()
    return _answer(request, "trust/partials/flag_row.html", {"flag": flag}, error)


@require_POST
@role_required(Role.ADMIN)
def proposal_decide(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    proposal = get_object_or_404(
        RubricProposal.objects.select_related("override__agent", "tenant"),
        tenant=tenant_membership(request).tenant,
        pk=pk,
    )
    error = _decision(
        ProposalDecisionForm(request.POST),
        "Choose to accept or reject the proposal; a note has at most 2,000 characters.",
        lambda data: governance.rubric_proposal_decide(
            proposal=proposal,
            accept=data["decision"] == "accept",
            note=data["note"],
            actor=_actor(request),
        ),
    )
    proposal.refresh_from_db()
    return _answer(
        request, "trust/partials/proposal_row.html", {"proposal": proposal, "is_admin": True}, error
    )
