"""The token-savings page: how much the content store kept out of agents' conversations."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from config.views import HtmxHttpRequest
from config.web import membership_required, partial_wanted, tenant_membership
from memory.content.forms import DEFAULT_PERIOD, SAVINGS_PERIODS, SavingsForm
from memory.content.selectors import content_runs_savings
from memory.episodic.views import bar_step


@membership_required
@require_GET
def token_savings(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    form = SavingsForm(request.GET)
    period = form.cleaned_data["period"] if form.is_valid() else ""
    days = SAVINGS_PERIODS[period or DEFAULT_PERIOD]
    since = timezone.now() - timedelta(days=days) if days is not None else None
    overview = content_runs_savings(tenant=tenant, since=since)
    context = {
        "form": form,
        "overview": overview,
        # A run's renderings can cost more than its results in full (short results: every
        # rendering carries a header line with the item id); the page says by how much
        # instead of drawing a bar that overflows to full.
        "rows": [
            (run, bar_step(run.returned_ratio), max(0, -run.tokens_saved)) for run in overview.runs
        ],
        "total_step": bar_step(overview.total.returned_ratio),
        "total_over": max(0, -overview.total.tokens_saved),
    }
    template = (
        "memory/partials/savings.html" if partial_wanted(request) else "memory/token_savings.html"
    )
    return render(request, template, context, status=200 if form.is_valid() else 400)
