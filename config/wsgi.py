from __future__ import annotations

import os
import sys

from django.core.wsgi import get_wsgi_application

from config.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

WEB_SWITCH_INTERVAL_SECONDS = 0.001

# Before the handler builds the middleware chain: Django's tracing adds a middleware of its own.
tracing_start()
application = get_wsgi_application()

# gunicorn and runserver load the application here: a deployment the search cannot serve (an old
# pgvector, vectors of the wrong size) stops them with the reason, before any request.
from django.db import connections  # noqa: E402

from config.checks import deployment_verify  # noqa: E402 (needs the apps loaded above)

deployment_verify()
# Requests run in other threads (gthread) with connections of their own; this one would idle.
connections.close_all()

# A request thread that comes back from the database or the embedder waits for Python's lock
# while another thread runs Python; by default the other thread keeps it up to 5 ms each time.
# A search (a dozen such returns) beside a batch store in the same process paid that wait again
# and again: with 1 ms its p95 rose 1.50 times under a 100 memories/s ingest instead of 1.64
# (median of runs, bench/locomo_api.py --mixed-ingest 100; docs/benchmarks.md).
sys.setswitchinterval(WEB_SWITCH_INTERVAL_SECONDS)
