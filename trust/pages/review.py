"""The review flow (issue 20, item 3): every override by agent, decider, round and status with
paging beyond the queue's 7 days, bulk confirm, and one override at a time with its two texts
side by side, a word diff and keys to move and decide.

Writes go through the services the queue uses (``override_confirm`` and ``overrides_confirm``,
``override_revert``, ``override_revert_withdraw``): one transaction each with its ledger event,
in the reviewer's name. After a decision the detail view moves on to the next waiting override
of the same filters and says, in the status line above it, what the decision did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from config.views import HtmxHttpRequest
from config.web import partial_wanted, role_required, tenant_membership
from ledger.models import Agent, Role
from trust.pages.diffs import word_diff
from trust.pages.forms import OverrideFilterForm, OverrideNoteForm, filters_query, override_ids
from trust.pages.rows import override_outcome
from trust.pages.views import NOTE_INVALID, _actor, _attempt, _override_rows, _pager_links
from trust.rounds import overrides
from trust.rounds import selectors as round_selectors
from trust.rounds.models import Override
from trust.rounds.selectors import OverrideFilters, ReviewStatus
from trust.scores import selectors as score_selectors

OVERRIDES_PER_PAGE = 20


def _filter_form(request: HtmxHttpRequest) -> OverrideFilterForm:
    tenant = tenant_membership(request).tenant
    agents = list(Agent.objects.filter(tenant=tenant).order_by("name").values_list("pk", "name"))
    form = OverrideFilterForm(request.GET, agents=agents)
    form.is_valid()
    return form


def _item_url(pk: int, query: str) -> str:
    url = reverse("trust:override_detail", args=[pk])
    return f"{url}?{query}" if query else url


def _list_url(query: str) -> str:
    url = reverse("trust:overrides")
    return f"{url}?{query}" if query else url


# --- The list: filters, pages, bulk confirm ------------------------------------------------------


@require_GET
@role_required(Role.REVIEWER)
def override_list(request: HtmxHttpRequest) -> HttpResponse:
    tenant = tenant_membership(request).tenant
    form = _filter_form(request)
    filters = form.filters()
    now = timezone.now()
    rows = round_selectors.overrides_filtered(tenant=tenant, filters=filters, now=now)
    page = Paginator(rows, OVERRIDES_PER_PAGE).get_page(request.GET.get("page"))
    (page_rows,) = _override_rows(request, list(page), now=now)
    query = filters_query(filters)
    context: dict[str, Any] = {
        "form": form,
        "filters": filters,
        "page": page,
        "page_links": _pager_links(request, page, "page"),
        "rows": page_rows,
        "first_url": _item_url(page[0].pk, query) if page.object_list else "",
        "query": query,
        "deciders": round_selectors.override_deciders(tenant=tenant),
        "now": now,
        "nav_section": "review",
        "waiting": filters.status == ReviewStatus.WAITING,
    }
    if partial_wanted(request, "review-list"):
        return render(request, "trust/partials/review_list.html", context)
    return render(request, "trust/review_overrides.html", context)


def _safe_next(request: HtmxHttpRequest) -> str:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return reverse("trust:overrides")


@require_POST
@role_required(Role.REVIEWER)
def overrides_confirm_bulk(request: HtmxHttpRequest) -> HttpResponse:
    """Confirm the selected overrides: all of them, one ``override.confirmed`` each, or none."""
    tenant = tenant_membership(request).tenant
    ids = override_ids(request.POST.getlist("ids"))
    confirmed: list[int] = []
    if ids is None:
        error = "An override id is not a number; nothing was confirmed."
    else:
        error = _attempt(
            lambda: overrides.overrides_confirm(
                tenant=tenant, override_ids=ids, actor=_actor(request)
            )
        )
        confirmed = [] if error else list(dict.fromkeys(ids))
    said = error or (
        f"Confirmed {len(confirmed)} override{'s' if len(confirmed) != 1 else ''} "
        f"({', '.join(f'#{pk}' for pk in confirmed)}): one override.confirmed event each, "
        "in your name."
    )
    if not partial_wanted(request):
        (messages.error if error else messages.success)(request, said)
        return redirect(_safe_next(request))
    changed = list(round_selectors.overrides_for_review(tenant=tenant).filter(pk__in=confirmed))
    now = timezone.now()
    (rows,) = _override_rows(request, changed, now=now)
    context = {"said": said, "error": bool(error), "rows": rows, "now": now}
    return render(request, "trust/partials/bulk_confirmed.html", context)


# --- One at a time -------------------------------------------------------------------------------


def _override(request: HtmxHttpRequest, pk: int) -> Override:
    # Another tenant's override is a plain 404, as in the API.
    found = round_selectors.override_for_detail(tenant=tenant_membership(request).tenant, pk=pk)
    if found is None:
        raise Http404("No such override.")
    return found


def _item_context(
    request: HtmxHttpRequest, override: Override, filters: OverrideFilters
) -> dict[str, Any]:
    tenant = tenant_membership(request).tenant
    now = timezone.now()
    query = filters_query(filters)
    around = round_selectors.override_neighbours(
        tenant=tenant, override=override, filters=filters, now=now
    )
    open_ = override.reverted_at is None
    previews = score_selectors.trust_if_regretted(
        tenant=tenant,
        overrides=[(override.pk, override.agent_id, override.occurred_at)] if open_ else [],
        now=now,
    )
    confirmation = round_selectors.override_confirmations(
        tenant=tenant, override_ids=[override.pk]
    ).get(override.pk)
    return {
        "override": override,
        "confirmation": confirmation,
        "outcome": override_outcome(override, confirmation, now),
        "preview": previews.get(override.pk),
        "diff": word_diff(override.agent_output, override.human_decision),
        "context_json": json.dumps(override.context, indent=2) if override.context else "",
        "around": around,
        "previous_url": _item_url(around.previous, query) if around.previous else "",
        "next_url": _item_url(around.next, query) if around.next else "",
        "list_url": _list_url(query),
        "query": query,
        "filters": filters,
        "now": now,
    }


@require_GET
@role_required(Role.REVIEWER)
def override_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    override = _override(request, pk)
    filters = _filter_form(request).filters()
    context = {**_item_context(request, override, filters), "nav_section": "review"}
    if partial_wanted(request, "review-item"):
        return render(request, "trust/partials/review_item.html", context)
    return render(request, "trust/review_item.html", context)


def _step_act(
    request: HtmxHttpRequest, override: Override, step: str
) -> tuple[Callable[[], object] | None, str]:
    """The service call a step makes, or the reason it cannot (an invalid note)."""
    actor = _actor(request)
    if step == "confirm":
        return (lambda: overrides.override_confirm(override=override, actor=actor)), ""
    form = OverrideNoteForm(request.POST)
    if not form.is_valid():
        return None, NOTE_INVALID
    note = form.cleaned_data["note"]
    if step == "regret":
        return (
            lambda: overrides.override_revert(
                override=override, reverted_by=actor, note=note, actor=actor
            )
        ), ""
    return (
        lambda: overrides.override_revert_withdraw(override=override, note=note, actor=actor)
    ), ""


def _step_said(override: Override, step: str, trust_before: float) -> str:
    agent = Agent.objects.only("name", "trust_score").get(pk=override.agent_id)
    trust = f"{agent.name}'s trust {trust_before:.3f} → {agent.trust_score:.3f}"
    if step == "confirm":
        return (
            f"Confirmed override #{override.pk} of {agent.name}: override.confirmed is in the "
            "ledger in your name; no score changes."
        )
    if step == "regret":
        return f"Marked override #{override.pk} regretted: {trust}."
    return f"Withdrew the revert of override #{override.pk}: it is open again; {trust}."


STEPS = ("confirm", "regret", "withdraw")


@require_POST
@role_required(Role.REVIEWER)
def override_step(request: HtmxHttpRequest, pk: int, step: str) -> HttpResponse:
    """Decide the override shown (confirm, regret or withdraw a regret), then show the next
    waiting one of the same filters; a withdrawal, or a refusal, stays on this one."""
    if step not in STEPS:
        raise Http404("No such step.")
    override = _override(request, pk)
    filters = _filter_form(request).filters()
    trust_before = Agent.objects.values_list("trust_score", flat=True).get(pk=override.agent_id)
    act, error = _step_act(request, override, step)
    if act is not None:
        error = _attempt(act)
    shown: Override | None = override
    said = error or _step_said(override, step, trust_before)
    if not error and step != "withdraw":
        following = round_selectors.override_next_waiting(
            tenant=override.tenant, after=override, filters=filters
        )
        shown = None if following is None else _override(request, following)
    query = filters_query(filters)
    url = _item_url(shown.pk, query) if shown else _list_url(query)
    if not partial_wanted(request):
        (messages.error if error else messages.success)(request, said)
        return redirect(url)
    if shown is not None:
        shown.refresh_from_db()
        context = _item_context(request, shown, filters)
    else:
        context = {
            "override": None,
            "list_url": _list_url(query),
            "filters": filters,
            "query": query,
        }
    undo = step == "regret" and not error
    context.update(
        said=said, error=bool(error), undo_id=override.pk if undo else None, swapped=True
    )
    response = render(request, "trust/partials/review_item.html", context)
    if shown is not None:
        response["HX-Push-Url"] = url
    return response
