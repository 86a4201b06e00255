"""The token-savings page's form: it parses the query string, nothing more."""

from __future__ import annotations

from typing import Any

from django import forms

SAVINGS_PERIODS = {"7": 7, "30": 30, "90": 90, "all": None}
DEFAULT_PERIOD = "30"


class SavingsForm(forms.Form):
    def __init__(self, data: Any, *args: Any, **kwargs: Any) -> None:
        # A first visit shows the last 30 days, and the select says so.
        if "period" not in data:
            data = data.copy()
            data["period"] = DEFAULT_PERIOD
        super().__init__(data, *args, **kwargs)

    period = forms.ChoiceField(
        required=False,
        choices=[
            ("7", "Last 7 days"),
            ("30", "Last 30 days"),
            ("90", "Last 90 days"),
            ("all", "All time"),
        ],
        label="Runs with results in",
    )
