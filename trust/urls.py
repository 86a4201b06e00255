"""The trust app's routes, in the shape every app's ``urls.py`` has: ``api_urlpatterns`` (under
/api/v1/) and ``page_urlpatterns`` (the pages, under their own prefix and namespace), each the
concatenation of its concepts' lists."""

from __future__ import annotations

from typing import Any

from trust.governance import urls as governance
from trust.interchange import urls as interchange
from trust.pages import urls as pages
from trust.rounds import urls as rounds
from trust.scores import urls as scores

# Governance first: its trust/devils-advocate/ and trust/metrics/ are words where the scores'
# trust/{agent_id}/ takes a value, and a detail route's default pattern ([^/.]+) would swallow
# them if it were tried first.
_concepts = (governance, rounds, scores, interchange, pages)
api_urlpatterns: list[Any] = [url for concept in _concepts for url in concept.api_urlpatterns]
page_urlpatterns: list[Any] = [url for concept in _concepts for url in concept.page_urlpatterns]
