"""Forms of the ledger's pages: they parse query strings, nothing more."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms

from config.datetimes import client_datetime_parse
from ledger.selectors import EventFilters


class UtcDateTimeField(forms.DateTimeField):
    """A datetime-local input read as UTC: the pages show every time in UTC."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")

    def to_python(self, value: Any) -> datetime | None:
        # An offset reaches the query in UTC (PostgreSQL refuses one past ±15:59: was a 500).
        moment = client_datetime_parse(value) if isinstance(value, str) else None
        if moment is not None:
            return moment
        moment = super().to_python(value)  # the other formats Django accepts, or "invalid"
        return moment.replace(tzinfo=UTC) if moment and moment.tzinfo is None else moment


class EventFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=200, label="Actor")
    kind = forms.CharField(required=False, max_length=100, label="Kind")
    run = forms.CharField(required=False, max_length=200, label="Run")
    since = UtcDateTimeField(required=False, label="From (UTC)")
    before = UtcDateTimeField(required=False, label="Before (UTC)")
    # The cursor of "load more": the seq of the last event shown.
    before_seq = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def filters(self) -> EventFilters:
        data = self.cleaned_data
        return EventFilters(
            actor=data["actor"].strip(),
            kind=data["kind"].strip(),
            run_id=data["run"].strip(),
            since=data["since"],
            before=data["before"],
        )


class JobScheduleForm(forms.Form):
    """One job's schedule as the app may change it (ledger.job_schedules)."""

    name = forms.CharField(max_length=100)
    enabled = forms.BooleanField(required=False, label="Runs")
    every_minutes = forms.IntegerField(required=False, label="Every (minutes)")
    daily_at = forms.TimeField(required=False, label="Daily at (UTC)", input_formats=["%H:%M"])

    def problem(self) -> str:
        return " ".join(
            f"{self[name].label}: {' '.join(str(e) for e in errors)}"
            for name, errors in self.errors.items()
        )
