"""The memory app's routes, in the shape every app's ``urls.py`` has: ``api_urlpatterns`` (under
/api/v1/) and ``page_urlpatterns`` (the pages, under their own prefix and namespace), each the
concatenation of its concepts' lists (``memory/<concept>/urls.py``)."""

from __future__ import annotations

from typing import Any

from django.urls import include, path

from memory.content import urls as content
from memory.context import urls as context
from memory.episodic import urls as episodic
from memory.knowledge import urls as knowledge
from memory.recall import urls as recall

# The order of the routes before the split, so every path resolves as it did.
CONCEPTS = (recall, episodic, knowledge, context, content)

api_urlpatterns: list[Any] = [
    pattern for concept in CONCEPTS for pattern in concept.api_urlpatterns
]
_pages = [pattern for concept in CONCEPTS for pattern in concept.page_urlpatterns]
page_urlpatterns: list[Any] = [path("memory/", include((_pages, "memory")))]
