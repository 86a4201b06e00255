"""Forms of the trust pages: the overview's filters and the review queue's decisions."""

from __future__ import annotations

from django import forms

from trust.governance.models import GamingFlag
from trust.rounds.policies import NOTE_MAX_CHARS
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
