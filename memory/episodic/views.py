"""The memory app's pages: the memory explorer and token savings (server-rendered, HTMX)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from config.views import HtmxHttpRequest
from config.web import membership_required, partial_wanted, tenant_membership
from ledger.models import Agent
from memory.episodic.forms import INACTIVE, SOURCE_LABELS, ExplorerForm
from memory.episodic.selectors import memories_inactive
from memory.search.filters import filter_parse
from memory.search.ranking import SearchHit, SearchWeights
from memory.search.selectors import memories_search

EXPLORER_TOP_K = 20
# The score terms in the order of the ranking formula, with the names people read.
TERMS = {
    "similarity": "Similarity",
    "recency": "Recency",
    "importance": "Importance",
    "source_priority": "Source priority",
}


def bar_step(value: float) -> int:
    """A share in [0, 1] as a width step of 2 %: pages.css has a class per step, because the
    Content-Security-Policy allows no inline style attributes."""
    return max(0, min(50, round(value * 50))) * 2


@dataclass(frozen=True)
class Term:
    key: str
    label: str
    value: float
    weight: float
    contribution: float
    step: int
    # The term's share of the whole bar of the score (the weights sum to 1).
    contribution_step: int


@dataclass(frozen=True)
class HitView:
    hit: SearchHit
    source_label: str
    terms: list[Term]
    score_step: int


def _hit_view(hit: SearchHit, weights: SearchWeights) -> HitView:
    terms = []
    for key, label in TERMS.items():
        value = hit.breakdown[key]
        contribution = hit.contributions[key]
        terms.append(
            Term(
                key=key,
                label=label,
                value=value,
                weight=getattr(weights, key),
                contribution=contribution,
                step=bar_step(value),
                contribution_step=bar_step(contribution),
            )
        )
    return HitView(
        hit=hit,
        source_label=SOURCE_LABELS[hit.source],
        terms=terms,
        score_step=bar_step(hit.score),
    )


@membership_required
@require_GET
def explorer(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    form = ExplorerForm(request.GET)
    context: dict[str, Any] = {"form": form, "terms": TERMS}
    status = 200
    if form.is_valid():
        data = form.cleaned_data
        agent = (
            get_object_or_404(Agent.objects.for_tenant(tenant), pk=data["agent"])
            if data["agent"]
            else None
        )
        context["agent"] = agent
        if agent is not None and data["status"] == INACTIVE:
            context["inactive"] = memories_inactive(
                agent=agent, query=data["q"], memory_type=data["memory_type"]
            )
        elif agent is not None and data["q"]:
            weights = SearchWeights.configured()
            context["outcome"] = memories_search(
                agent=agent,
                weights=weights,
                query=data["q"],
                top_k=EXPLORER_TOP_K,
                sources=data["sources"],
                filters=filter_parse(
                    {"memory_type": data["memory_type"]} if data["memory_type"] else None
                ),
                record_retrieval=False,
            )
            context["hits"] = [_hit_view(hit, weights) for hit in context["outcome"].hits]
    else:
        status = 400
    if partial_wanted(request):
        return render(request, "memory/partials/explorer_results.html", context, status=status)
    context["agents"] = list(Agent.objects.for_tenant(tenant).order_by("name")[:500])
    return render(request, "memory/explorer.html", context, status=status)
