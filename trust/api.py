from __future__ import annotations

from typing import Any

api_urls: list[Any] = []
