"""The trust app's API routes: the core (rounds, dissents, overrides, scores, interchange) and the
governance (Devil's Advocate, gaming flags, rubric, metrics)."""

from __future__ import annotations

from trust.api import api_urls as core_urls
from trust.governance_api import api_urls as governance_urls

# Governance first: its trust/devils-advocate/ and trust/metrics/ are words where the core's
# trust/{agent_id}/ takes a value, and a detail route's default pattern ([^/.]+) would swallow
# them if it were tried first.
api_urls = [*governance_urls, *core_urls]
