"""Settings of the gunicorn server the client tests talk to: the test settings, on the test
database pytest-django created for this run (its name comes from the fixture)."""

from __future__ import annotations

import os

from config.settings_test import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["AGENT_MEMORY_SERVER_DB_NAME"]  # noqa: F405
# No Celery worker serves this server; its queued tasks stay in the process instead of waiting
# in the test Redis for a worker that another test starts after these rows were flushed.
CELERY_BROKER_URL = "memory://"
CELERY_RESULT_BACKEND = "cache+memory://"
