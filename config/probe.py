"""The image's HEALTHCHECK: ``python -m config.probe`` exits 0 when the web process answers.

A liveness probe on ``/livez`` (config.probes), which touches no dependency: a database, Redis or
background job that is unwell is ``/readyz``'s and ``/healthz``'s to report, and restarting this
container would not cure it; a process that accepts no connection or answers nothing within the
timeout is what a restart is for. It imports no Django, so a probe costs a few milliseconds.
Any answer counts, a 400 for an unknown Host included: the probe does not know ALLOWED_HOSTS.
"""

from __future__ import annotations

import http.client
import sys

PROBE_PATH = "/livez"
PROBE_TIMEOUT_SECONDS = 4.0


def probe(host: str = "127.0.0.1", port: int = 8000, timeout: float = PROBE_TIMEOUT_SECONDS) -> str:
    """Why the web process looks dead, or "" when it answered."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", PROBE_PATH, headers={"Host": "localhost"})
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return f"no answer from {host}:{port}{PROBE_PATH}: {type(exc).__name__}: {exc}"
    finally:
        connection.close()
    return "" if 100 <= status < 600 else f"{host}:{port}{PROBE_PATH} answered status {status}"


def main() -> int:
    problem = probe()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
