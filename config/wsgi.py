from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from config.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

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
