"""Forms of the trust pages: the overview's filters and the review queue's decisions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.urls import reverse
from django.utils.http import urlencode

from trust.governance.models import GamingFlag
from trust.rounds.policies import NOTE_MAX_CHARS
from trust.rounds.selectors import OverrideFilters, ReviewStatus
from trust.scores.selectors import OVERVIEW_SORTS

YES_NO_ANY = [("", "Any"), ("yes", "Yes"), ("no", "No")]


class OverviewFilterForm(forms.Form):
    """The trust overview's filters. Bad values fall back to the defaults: it is a GET form."""

    q = forms.CharField(label="Search agents", required=False, max_length=100)
    probation = forms.ChoiceField(label="On probation", choices=YES_NO_ANY, required=False)
    flagged = forms.ChoiceField(label="Open gaming flags", choices=YES_NO_ANY, required=False)
    sort = forms.ChoiceField(
        label="Sort by", choices=[(key, key) for key in OVERVIEW_SORTS], required=False
    )

    def filters(self) -> dict[str, object]:
        """Keyword arguments for selectors.trust_overview_agents from the valid fields."""
        data = self.cleaned_data if self.is_valid() else {}
        as_bool = {"yes": True, "no": False}
        return {
            "search": (data.get("q") or "").strip(),
            "probation": as_bool.get(data.get("probation") or ""),
            "flagged": as_bool.get(data.get("flagged") or ""),
            "sort": data.get("sort") or "name",
        }


class FlagReviewForm(forms.Form):
    decision = forms.ChoiceField(
        choices=[
            (GamingFlag.Status.DISMISSED, "Clear"),
            (GamingFlag.Status.CONFIRMED, "Escalate"),
        ]
    )
    note = forms.CharField(label="Note", required=False, max_length=NOTE_MAX_CHARS)


class ProposalDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("accept", "Accept"), ("reject", "Reject")])
    note = forms.CharField(label="Note", required=False, max_length=NOTE_MAX_CHARS)


class OverrideNoteForm(forms.Form):
    """The optional note of a revert or of its withdrawal."""

    note = forms.CharField(label="Why (optional)", required=False, max_length=NOTE_MAX_CHARS)


class OverrideFilterForm(forms.Form):
    """The review flow's filters, combinable. Bad values fall back to the defaults (a GET form):
    an agent of another tenant is no choice, so it filters nothing."""

    agent = forms.TypedChoiceField(label="Agent", coerce=int, required=False, empty_value=None)
    decided_by = forms.CharField(label="Decided by", required=False, max_length=200)
    round = forms.CharField(label="Round", required=False, max_length=200)
    status = forms.ChoiceField(
        label="Status",
        required=False,
        choices=[
            (ReviewStatus.WAITING, "Waiting for review"),
            (ReviewStatus.CONFIRMED, "Confirmed"),
            (ReviewStatus.REGRETTED, "Regretted"),
            (ReviewStatus.STANDS, "Stood past its deadline"),
            (ReviewStatus.ANY, "Any status"),
        ],
    )

    def __init__(self, data: Any, *, agents: list[tuple[int, str]]) -> None:
        super().__init__(data)
        self.fields["agent"].choices = [("", "Any agent"), *agents]  # type: ignore[attr-defined]
        # A choice applies at once; typed text waits for Enter or Apply, since the answer
        # replaces the form (it says what the table shows) and would cut the typing short.
        for name in ("agent", "status"):
            self.fields[name].widget.attrs.update(
                {
                    "hx-get": reverse("trust:overrides"),
                    "hx-include": "closest form",
                    "hx-target": "#review-list",
                    "hx-push-url": "true",
                    "hx-trigger": "change",
                }
            )

    def filters(self) -> OverrideFilters:
        data = self.cleaned_data if self.is_valid() else {}
        return OverrideFilters(
            agent_id=data.get("agent"),
            decided_by=(data.get("decided_by") or "").strip(),
            round_id=(data.get("round") or "").strip(),
            status=data.get("status") or ReviewStatus.WAITING,
        )


def filters_query(filters: OverrideFilters) -> str:
    """The query string that selects ``filters`` (defaults left out), for links that keep them."""
    pairs = {
        "agent": "" if filters.agent_id is None else str(filters.agent_id),
        "decided_by": filters.decided_by,
        "round": filters.round_id,
        "status": "" if filters.status == ReviewStatus.WAITING else filters.status,
    }
    return urlencode({key: value for key, value in pairs.items() if value})


def override_ids(values: list[str]) -> list[int] | None:
    """The bulk confirm's ``ids`` as whole numbers, or None when any is not one."""
    if not all(value.isdigit() and len(value) < 19 for value in values):
        return None
    return [int(value) for value in values]
