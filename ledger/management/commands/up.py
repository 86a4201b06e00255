"""``python manage.py up``: the whole service from one command.

Starts the embedded PostgreSQL and Redis (unless ``DATABASE_URL`` / ``REDIS_URL`` point elsewhere),
migrates, collects static files, makes sure the demo tenant and an admin login exist, then runs
gunicorn, a Celery worker and Celery beat as supervised children until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from config import embedded, embedded_redis
from config.checks import DeploymentMismatch, deployment_verify
from config.env import env_int, env_str
from config.health import health_report
from config.metrics import metrics_dir_reset
from config.supervisor import (
    CRASH_LOOP_LIMIT,
    CRASH_LOOP_WINDOW_SECONDS,
    Child,
    Console,
    DataFolderLock,
    Supervisor,
    already_running_message,
)
from ledger.demo import (
    admin_user_ensure,
    demo_data_seed,
    demo_first_job_runs_queue,
    demo_tenant_ensure,
)
from ledger.jobs import job_schedules_ensure

HEALTH_POLL_SECONDS = 0.5
HEALTH_WARN_AFTER_SECONDS = 120.0
SUPERVISE_TICK_SECONDS = 0.2


def _seconds_since_process_start() -> float:
    """How long ago the kernel started this process, so start-up time includes Django's import."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        # Field 22 of /proc/<pid>/stat, counted from the state field (field 3) after the name.
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass(frozen=True)
class Bind:
    """Where gunicorn listens, and how to reach it from this machine."""

    spec: str
    host: str = ""
    port: int = 0
    unix_path: str = ""

    @classmethod
    def parse(cls, spec: str) -> Bind:
        if spec.startswith("unix:"):
            return cls(spec=spec, unix_path=spec.removeprefix("unix:"))
        host, _, port = spec.rpartition(":")
        if not host or not port.isdigit():
            raise CommandError(f"--bind must be HOST:PORT or unix:PATH, got {spec!r}.")
        return cls(spec=spec, host=host.strip("[]"), port=int(port))

    @property
    def local_host(self) -> str:
        """The address to connect to: a wildcard bind is reached through loopback."""
        if self.host in ("0.0.0.0", ""):  # noqa: S104 (comparing, not binding)
            return "127.0.0.1"
        if self.host == "::":
            return "::1"
        return self.host

    @property
    def url(self) -> str:
        if self.unix_path:
            return f"unix:{self.unix_path}"
        host = f"[{self.local_host}]" if ":" in self.local_host else self.local_host
        return f"http://{host}:{self.port}"

    def check_free(self) -> None:
        """Fail early with a plain message rather than let gunicorn crash-loop on a busy port."""
        if self.unix_path:
            return
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise CommandError(f"Cannot resolve --bind host {self.host!r}: {exc}") from exc
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            # gunicorn sets SO_REUSEADDR too, so sockets in TIME_WAIT do not count as busy.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise CommandError(
                        f"{self.spec} is already in use; choose another address with --bind "
                        "or AGENT_MEMORY_BIND."
                    ) from exc
                raise CommandError(f"Cannot listen on {self.spec}: {exc.strerror}") from exc

    def answers(self) -> bool:
        try:
            if self.unix_path:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                    client.settimeout(1.0)
                    client.connect(self.unix_path)
            else:
                socket.create_connection((self.local_host, self.port), timeout=1.0).close()
        except OSError:
            return False
        return True


def static_sources_fingerprint() -> str:
    """A digest of the files collectstatic would collect: their names, sizes and mtimes."""
    from django.apps import apps
    from django.contrib.staticfiles.finders import get_finders

    ignore_patterns = apps.get_app_config("staticfiles").ignore_patterns  # type: ignore[attr-defined]
    entries = [str(settings.STORAGES["staticfiles"]["BACKEND"]), str(settings.STATIC_ROOT)]
    for finder in get_finders():
        for path, storage in finder.list(ignore_patterns):
            stat = os.stat(storage.path(path))
            prefix = getattr(storage, "prefix", None) or ""
            entries.append(f"{prefix}/{path}\0{stat.st_size}\0{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()


def _heartbeat_since(report: dict[str, Any], moment: float) -> bool:
    """Whether the worker's heartbeat is from after ``moment``, not left over from a last run."""
    age = report["checks"]["worker"].get("age_seconds")
    # age_seconds is rounded to a tenth of a second.
    return age is not None and time.time() - age >= moment - 0.1


def _gunicorn_control_socket_args() -> list[str]:
    """Put gunicorn's control socket (gunicorn 25+) under the data folder.

    Its default, ~/.gunicorn/gunicorn.ctl, is shared by every instance the user runs, so two
    data folders served at once would take it from each other.
    """
    from gunicorn.config import KNOWN_SETTINGS

    if not any(setting.name == "control_socket" for setting in KNOWN_SETTINGS):
        return []
    settings.EMBEDDED.socket_dir.mkdir(parents=True, exist_ok=True)
    return ["--control-socket", str(settings.EMBEDDED.socket_dir / "gunicorn.ctl")]


class Command(BaseCommand):
    help = (
        "Run Agent Memory: database, Redis, web server, worker and scheduler, in one command. "
        "Stop with Ctrl-C."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--demo", action="store_true", help="Add demo agents, runs and an API key if missing."
        )
        parser.add_argument(
            "--bind",
            default=env_str("AGENT_MEMORY_BIND", "127.0.0.1:8000"),
            help="HOST:PORT (or unix:PATH) for the web server; env AGENT_MEMORY_BIND.",
        )
        parser.add_argument(
            "--web-workers",
            type=int,
            default=env_int("WEB_CONCURRENCY", 2),
            help="gunicorn worker processes; env WEB_CONCURRENCY (default 2).",
        )
        parser.add_argument(
            "--web-threads",
            type=int,
            default=env_int("WEB_THREADS", 8),
            help="request threads per web process; env WEB_THREADS (default 8).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic() - _seconds_since_process_start()
        lock = DataFolderLock(settings.DATA_DIR)
        if not lock.acquire():
            self.stderr.write(already_running_message(lock))
            sys.exit(1)
        self._stop_signal: int | None = None
        self._hurry = threading.Event()
        self._uses_embedded_postgres = not env_str("DATABASE_URL")
        self._uses_embedded_redis = not env_str("REDIS_URL")
        self._console = Console(self.stdout)
        self._pending_notes: list[str] = []
        supervisor: Supervisor | None = None
        failed: Child | None = None
        # SIGHUP too: the children sit in their own sessions, so a closed terminal reaches only
        # us, and dying without stopping them would leave them running.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        try:
            if options["web_workers"] < 1:
                raise CommandError("--web-workers (WEB_CONCURRENCY) must be at least 1.")
            if options["web_threads"] < 1:
                raise CommandError("--web-threads (WEB_THREADS) must be at least 1.")
            bind = Bind.parse(options["bind"])
            bind.check_free()
            self._prepare(demo=options["demo"], verbosity=options["verbosity"])
            if self._stop_signal is None:
                supervisor = Supervisor(
                    self._children(bind, options["web_workers"], options["web_threads"]),
                    env={
                        **os.environ,
                        "AGENT_MEMORY_DATA_DIR": str(settings.DATA_DIR),
                        "PYTHONUNBUFFERED": "1",
                    },
                    console=self._console,
                )
                failed = self._supervise(supervisor, bind, started)
        finally:
            if self._stop_signal is not None:
                self._console.line(
                    "up",
                    f"{signal.Signals(self._stop_signal).name} received; shutting down "
                    "(send it again to stop without waiting)",
                )
            if supervisor is not None:
                supervisor.stop(hurry=self._hurry)
            self._flush_notes()
            self._stop_embedded()
            lock.release()
        if failed is not None:
            raise CommandError(
                f"{failed.name} kept crashing ({CRASH_LOOP_LIMIT} times within "
                f"{CRASH_LOOP_WINDOW_SECONDS:.0f} s); see its output above."
            )
        self._console.line("up", "stopped")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop_signal is None:
            self._stop_signal = signum
        else:
            self._hurry.set()

    # --- Start-up ------------------------------------------------------------------------------

    def _prepare(self, *, demo: bool, verbosity: int) -> None:
        """Servers, schema, static files and identity; each step checks for an early Ctrl-C."""
        steps: list[Callable[[], object]] = [
            metrics_dir_reset,
            self._start_embedded,
            lambda: call_command("migrate", interactive=False, verbosity=verbosity),
            self._verify_deployment,
            self._ensure_job_schedules,
            lambda: self._collect_static(verbosity=verbosity),
            lambda: self._pending_notes.extend(self.ensure_identity(demo=demo)),
        ]
        for step in steps:
            if self._stop_signal is not None:
                return
            step()
        # The children open their own connections; ours would sit idle until shutdown.
        connections.close_all()

    def _verify_deployment(self) -> None:
        try:
            deployment_verify()
        except DeploymentMismatch as exc:
            raise CommandError(str(exc)) from exc

    def _ensure_job_schedules(self) -> None:
        # The data migration seeded them once; this brings back a job whose row was deleted.
        created = job_schedules_ensure()
        if created:
            self._say(f"scheduled {created} background job(s) with their default intervals")

    def _collect_static(self, *, verbosity: int) -> None:
        # collectstatic re-hashes and re-compresses every file (seconds, on each start); skip it
        # when the source files are exactly those collected last time.
        marker = settings.DATA_DIR / "static.fingerprint"
        fingerprint = static_sources_fingerprint()
        collected = Path(settings.STATIC_ROOT).is_dir() and marker.is_file()
        if collected and marker.read_text().strip() == fingerprint:
            self._say("static files unchanged since the last collectstatic")
            return
        call_command("collectstatic", interactive=False, verbosity=verbosity)
        marker.write_text(fingerprint + "\n")

    def _start_embedded(self) -> None:
        layout = settings.EMBEDDED
        if self._uses_embedded_postgres:
            started = embedded.postgres_start(layout)
            self._say(
                f"PostgreSQL {'started' if started else 'already running'} in {layout.pgdata}"
            )
        if self._uses_embedded_redis:
            started = embedded_redis.redis_start(layout)
            self._say(
                f"Redis {'started' if started else 'already running'} on {layout.redis_socket}"
            )

    def ensure_identity(self, *, demo: bool) -> list[str]:
        """Make sure the demo tenant and the admin login exist, and the demo data with ``demo``.

        Reports progress on stdout and returns the lines that carry secrets (a generated
        password, a new API key) for the caller to show once, in the banner.
        """
        tenant, created = demo_tenant_ensure()
        self._say(f"demo tenant '{tenant.slug}' {'created' if created else 'exists'}")
        username = env_str("AGENT_MEMORY_ADMIN_USERNAME", "admin")
        admin = admin_user_ensure(
            tenant=tenant,
            username=username,
            password=env_str("AGENT_MEMORY_ADMIN_PASSWORD") or None,
        )
        notes: list[str] = []
        if admin.generated_password is not None:
            self._say(f"admin user '{username}' created; its password is shown once below")
            notes += [
                f"  Admin password for '{username}': {admin.generated_password}",
                "  (generated now and not shown again; change it with "
                f"python manage.py changepassword {username})",
            ]
        elif admin.created:
            self._say(f"admin user '{username}' created with AGENT_MEMORY_ADMIN_PASSWORD")
        else:
            self._say(f"admin user '{username}' exists")
        if demo:
            seeded = demo_data_seed(tenant=tenant)
            if seeded.agents_created or seeded.runs_seeded:
                self._say(
                    f"demo data added: {len(seeded.agents_created)} agents, "
                    f"{len(seeded.runs_seeded)} runs ({seeded.events_appended} events)"
                )
            else:
                self._say("demo data already present")
            for app, note in seeded.extras.items():
                self._say(f"demo {app} data added: {note}")
            # Here, not in the seeding: only a starting service has a worker to run them.
            queued = demo_first_job_runs_queue()
            if queued:
                self._say(f"{queued} job(s) that never ran queued for a first run")
            if seeded.api_key is not None:
                notes += [
                    f"  Demo API key (tenant '{tenant.slug}', role admin): {seeded.api_key}",
                    "  (created now and not shown again; send it as 'Authorization: Bearer <key>')",
                ]
        return notes

    def _say(self, text: str) -> None:
        # Used before any child runs, so nothing else writes to stdout at the same time.
        self.stdout.write(f"[up] {text}")
        self.stdout.flush()

    def _children(self, bind: Bind, web_workers: int, web_threads: int) -> list[Child]:
        python = sys.executable
        return [
            Child(
                "web",
                [
                    python, "-m", "gunicorn", "config.wsgi:application",
                    "--bind", bind.spec,
                    "--workers", str(web_workers),
                    "--worker-class", "gthread",
                    # A batch store holds its thread while the embedder works (most of a
                    # second for 10 memories on 2 busy cores): with 4, an ingest's few
                    # connections could take every thread of a process, and its searches
                    # queued behind them (docs/benchmarks.md).
                    "--threads", str(web_threads),
                    "--access-logfile", "-",
                    "--graceful-timeout", "10",
                    *_gunicorn_control_socket_args(),
                ],
            ),
            Child(
                "worker",
                [
                    python, "-m", "celery", "-A", "config", "worker",
                    "--loglevel", "INFO", "--concurrency", "2", "--hostname", "worker@%h",
                    # Mingle syncs state with sibling workers; there are none, and it costs 1 s.
                    "--without-mingle",
                ],
            ),
            Child(
                "beat",
                [
                    # The schedule is in the database (django-celery-beat), edited in the admin.
                    python, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
                    "--scheduler", settings.CELERY_BEAT_SCHEDULER,
                    "--pidfile=",
                ],
            ),
        ]  # fmt: skip

    # --- Running -------------------------------------------------------------------------------

    def _supervise(self, supervisor: Supervisor, bind: Bind, started: float) -> Child | None:
        """Start the children and supervise them until a stop signal or a crash loop.

        Returns the crash-looping child, or None after a stop signal.
        """
        spawned_at = time.time()
        supervisor.start()
        ready = False
        warned = False
        next_health_check = 0.0
        while self._stop_signal is None:
            failed = supervisor.check()
            if failed is not None:
                return failed
            now = time.monotonic()
            if not ready and now >= next_health_check:
                next_health_check = now + HEALTH_POLL_SECONDS
                report = health_report()
                if report["ok"] and _heartbeat_since(report, spawned_at) and bind.answers():
                    ready = True
                    connections.close_all()
                    self._banner(bind, elapsed=time.monotonic() - started)
                elif not warned and now - started > HEALTH_WARN_AFTER_SECONDS:
                    warned = True
                    self._console.line(
                        "up",
                        f"still not healthy after {HEALTH_WARN_AFTER_SECONDS:.0f} s: "
                        f"{report['checks']}; web answering: {bind.answers()}",
                    )
            time.sleep(SUPERVISE_TICK_SECONDS)
        return None

    def _banner(self, bind: Bind, *, elapsed: float) -> None:
        username = env_str("AGENT_MEMORY_ADMIN_USERNAME", "admin")
        lines = [
            "",
            "=" * 72,
            f"  Agent Memory is up (healthy in {elapsed:.1f} s)",
            "",
            f"  Web:       {bind.url}/",
            f"  Admin:     {bind.url}/admin/   (login: {username})",
            f"  API docs:  {bind.url}/api/docs/",
            f"  Data:      {settings.DATA_DIR}",
            *self._take_notes(),
            "",
            "  Stop with Ctrl-C.",
            "=" * 72,
            "",
        ]
        self._console.block(lines)

    def _take_notes(self) -> list[str]:
        notes, self._pending_notes = self._pending_notes, []
        return ["", *notes] if notes else []

    def _flush_notes(self) -> None:
        """Secrets not yet shown (we stopped before the banner) are shown now, or never."""
        notes = self._take_notes()
        if notes:
            self._console.block(notes)

    # --- Shutdown ------------------------------------------------------------------------------

    def _stop_embedded(self) -> None:
        connections.close_all()
        layout = settings.EMBEDDED
        if self._uses_embedded_redis:
            self._console.line("up", "stopping Redis")
            embedded_redis.redis_stop(layout)
        if self._uses_embedded_postgres:
            self._console.line("up", "stopping PostgreSQL")
            embedded.postgres_stop(layout)
