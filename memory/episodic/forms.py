"""Forms of the memory app's pages: they parse query strings, nothing more."""

from __future__ import annotations

from typing import Any

from django import forms

from memory.episodic.policies import MEMORY_TYPES
from memory.search.ranking import AGENT_MEMORY, AUDIT_LOG, KNOWLEDGE_BASE, SOURCES, WORKFLOW_STEPS

SOURCE_LABELS = {
    AGENT_MEMORY: "Agent memory",
    AUDIT_LOG: "Audit log",
    WORKFLOW_STEPS: "Workflow steps",
    KNOWLEDGE_BASE: "Knowledge base",
}
SEARCHABLE = "searchable"
INACTIVE = "inactive"


class ExplorerForm(forms.Form):
    # The agent's id is looked up in the person's tenant by the view (another tenant's is a 404).
    agent = forms.IntegerField(required=False, min_value=1, label="Agent")
    q = forms.CharField(required=False, max_length=1000, label="Query", strip=True)
    sources = forms.MultipleChoiceField(
        required=False,
        choices=[(source, SOURCE_LABELS[source]) for source in SOURCES],
        widget=forms.CheckboxSelectMultiple,
        label="Sources",
    )
    memory_type = forms.ChoiceField(
        required=False,
        choices=[("", "Any type"), *((t, t.replace("_", " ").capitalize()) for t in MEMORY_TYPES)],
        label="Memory type",
    )
    status = forms.ChoiceField(
        required=False,
        choices=[
            (SEARCHABLE, "Searchable"),
            (INACTIVE, "Archived or expired"),
        ],
        label="Memories",
    )

    def __init__(self, data: Any, *args: Any, **kwargs: Any) -> None:
        # A first visit (no sources in the query string) searches every source.
        if "sources" not in data:
            data = data.copy()
            data.setlist("sources", list(SOURCES))
        super().__init__(data, *args, **kwargs)
