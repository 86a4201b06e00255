"""Settings of a gunicorn server started by a test on this run's test database (its name comes
from the environment the test sets), with the production middleware and Redis.

Its Celery messages go to Redis database 1, where no test worker listens: a task queued by this
server must not be run later by another test's worker against rows that were flushed meanwhile.
"""

from __future__ import annotations

import os

from config.settings import _celery_url
from config.settings_test import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["AGENT_MEMORY_SERVER_DB_NAME"]  # noqa: F405
CELERY_BROKER_URL = _celery_url(REDIS_URL.replace("db=0", "db=1"))  # noqa: F405
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
