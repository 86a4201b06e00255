from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

from config.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Before the handler builds the middleware chain: Django's tracing adds a middleware of its own.
tracing_start()
application = get_asgi_application()
