"""``python manage.py services start|stop|status``: the embedded PostgreSQL and Redis by hand.

``up`` manages them itself; this is for running other commands (a shell, tests, a migration)
against the data folder without the whole service, and for stopping what those left running.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config import embedded, embedded_redis
from config.env import env_str
from config.supervisor import DataFolderLock, already_running_message


class Command(BaseCommand):
    help = "Start, stop or report the embedded PostgreSQL and Redis of the data folder."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["start", "stop", "status"])

    def handle(self, *args: Any, **options: Any) -> None:
        layout = settings.EMBEDDED
        action = options["action"]
        if action == "start":
            postgres = embedded.postgres_start(layout)
            self.stdout.write(
                f"PostgreSQL {'started' if postgres else 'already running'} in {layout.pgdata}"
            )
            redis = embedded_redis.redis_start(layout)
            self.stdout.write(
                f"Redis {'started' if redis else 'already running'} on {layout.redis_socket}"
            )
        elif action == "stop":
            lock = DataFolderLock(settings.DATA_DIR)
            # Holding the lock while stopping also keeps an ``up`` from starting halfway through.
            if not lock.acquire():
                raise CommandError(
                    f"{already_running_message(lock)} Stop `up` (Ctrl-C in its terminal, or "
                    "SIGTERM to that pid); it stops PostgreSQL and Redis itself."
                )
            try:
                embedded_redis.redis_stop(layout)
                self.stdout.write("Redis stopped")
                embedded.postgres_stop(layout)
                self.stdout.write("PostgreSQL stopped")
            finally:
                lock.release()
        else:
            self._status()

    def _status(self) -> None:
        layout = settings.EMBEDDED
        postgres_socket = layout.socket_dir / ".s.PGSQL.5432"
        postgres = "answering" if embedded.postgres_is_running(layout) else "not running"
        redis = "answering" if embedded_redis.redis_is_running(layout) else "not running"
        lock = DataFolderLock(settings.DATA_DIR)
        if lock.acquire():
            lock.release()
            up = "not running"
        else:
            up = f"running (pid {lock.holder_pid() or 'unknown'})"
        lines = [
            f"Data folder:  {settings.DATA_DIR}",
            f"PostgreSQL:   {postgres}  socket {postgres_socket}  data {layout.pgdata}",
            f"Redis:        {redis}  socket {layout.redis_socket}",
            f"up:           {up}",
        ]
        if env_str("DATABASE_URL"):
            lines.append("Note: DATABASE_URL is set, so the service uses that database instead.")
        if env_str("REDIS_URL"):
            lines.append("Note: REDIS_URL is set, so the service uses that Redis instead.")
        self.stdout.write("\n".join(lines))
