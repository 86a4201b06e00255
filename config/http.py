"""A small JSON-over-HTTP client for the optional outside services (embeddings, LLM endpoints).

Standard library only: these calls are few and simple, and a failure must surface as one
exception type that callers turn into a fallback.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class ExternalServiceError(RuntimeError):
    """An outside endpoint failed, timed out, or answered something unusable."""


def post_json(url: str, body: dict[str, Any], *, api_key: str = "", timeout: float) -> Any:
    if not url.startswith(("http://", "https://")):
        raise ExternalServiceError(f"Endpoint URL must be http(s): {url!r}")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(  # noqa: S310 (scheme checked above)
        url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise ExternalServiceError(f"{url} answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ExternalServiceError(f"{url} unreachable: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ExternalServiceError(f"{url} answered something that is not JSON") from exc
