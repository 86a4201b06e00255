"""The search's answer, written out by hand for speed, is what DRF's declared fields render."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from memory.episodic.services import MemoryDraft, memories_store
from memory.search.selectors import memories_search
from memory.search.serializers import SearchResultSerializer

pytestmark = pytest.mark.django_db


class DeclaredFieldsResult(SearchResultSerializer):
    def to_representation(self, instance: Any) -> Any:
        return serializers.Serializer.to_representation(self, instance)


def test_the_written_out_answer_equals_the_declared_fields(tenant, make_agent):
    agent = make_agent(tenant, name="alpha")
    drafts = [
        MemoryDraft(content=f"release {n} rolled back after the latency incident", tags=[f"t{n}"])
        for n in range(6)
    ]
    memories_store(agent=agent, drafts=drafts, actor="system")

    outcome = memories_search(agent=agent, query="latency incident rollback", top_k=5)

    assert outcome.hits
    assert SearchResultSerializer(outcome).data == DeclaredFieldsResult(outcome).data
