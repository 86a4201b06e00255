"""The trust app's API routes: the core (rounds, dissents, overrides, scores, interchange) and the
governance (Devil's Advocate, gaming flags, rubric, metrics)."""

from __future__ import annotations

from trust.api import api_urls as core_urls
from trust.governance_api import api_urls as governance_urls

api_urls = [*core_urls, *governance_urls]
