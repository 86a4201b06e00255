"""The process side of ``manage.py up`` (ledger/management/commands/up.py): the lock that keeps
one ``up`` per data folder, and the supervisor that runs gunicorn, the Celery worker and beat as
children, echoes their output and restarts them with backoff until they crash-loop."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.management.base import OutputWrapper

RESTART_BACKOFF_FIRST_SECONDS = 1.0
RESTART_BACKOFF_MAX_SECONDS = 30.0
CRASH_LOOP_LIMIT = 5
CRASH_LOOP_WINDOW_SECONDS = 60.0
# A child that ran this long before exiting gets the short backoff again: it was not crash-looping.
STABLE_RUN_SECONDS = 60.0
STOP_GRACE_SECONDS = 15.0


class DataFolderLock:
    """``<data dir>/up.lock``: held by the one ``up`` serving a data folder, for its whole life.

    A kernel ``flock`` rather than a pid file alone, so a crashed ``up`` never leaves a stale
    lock behind. The pid written inside is only for the message the next ``up`` prints.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "up.lock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # os.open descriptors are not inherited by children, so no server we start keeps the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def holder_pid(self) -> int | None:
        try:
            return int(self.path.read_text().strip())
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def already_running_message(lock: DataFolderLock) -> str:
    pid = lock.holder_pid()
    return (
        f"Agent Memory is already running on this data folder ({settings.DATA_DIR}, "
        f"pid {pid if pid is not None else 'unknown'}); stop it first."
    )


class Console:
    """Line-at-a-time output shared by the echo threads and the supervisor."""

    def __init__(self, stream: OutputWrapper) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def line(self, source: str, text: str) -> None:
        with self._lock:
            self._stream.write(f"[{source}] {text}")
            self._stream.flush()

    def block(self, lines: list[str]) -> None:
        with self._lock:
            for text in lines:
                self._stream.write(text)
            self._stream.flush()


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = RESTART_BACKOFF_FIRST_SECONDS
    restart_at: float | None = None
    exits: deque[float] = field(default_factory=deque)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"status {code}"


def _kill_group(pid: int) -> None:
    # Each child leads its own process group; this also reaches gunicorn and Celery pool workers.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class Supervisor:
    """Runs the children, echoes their output, and restarts them with backoff when they exit."""

    def __init__(self, children: list[Child], *, env: dict[str, str], console: Console) -> None:
        self.children = children
        self.env = env
        self.console = console

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        process = subprocess.Popen(
            child.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=settings.BASE_DIR,
            # Own process group: a terminal's Ctrl-C reaches only ``up``, which stops children
            # in order instead of every process dying at once.
            start_new_session=True,
        )
        child.process = process
        child.started_at = time.monotonic()
        assert process.stdout is not None
        threading.Thread(
            target=self._echo,
            args=(child.name, process.stdout),
            name=f"echo-{child.name}",
            daemon=True,
        ).start()

    def _echo(self, name: str, stream: IO[bytes]) -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                self.console.line(name, raw.decode("utf-8", errors="replace").rstrip("\r\n"))

    def check(self) -> Child | None:
        """Restart children that exited or are due; return a child that is crash-looping."""
        now = time.monotonic()
        for child in self.children:
            if child.process is None:
                if child.restart_at is not None and now >= child.restart_at:
                    child.restart_at = None
                    self.console.line("up", f"restarting {child.name}")
                    self._spawn(child)
                continue
            code = child.process.poll()
            if code is None:
                continue
            _kill_group(child.process.pid)
            child.process = None
            ran_for = now - child.started_at
            child.exits.append(now)
            while child.exits and now - child.exits[0] > CRASH_LOOP_WINDOW_SECONDS:
                child.exits.popleft()
            if len(child.exits) >= CRASH_LOOP_LIMIT:
                self.console.line(
                    "up",
                    f"{child.name} exited ({_describe_exit(code)}) {len(child.exits)} times "
                    f"within {CRASH_LOOP_WINDOW_SECONDS:.0f} s; giving up",
                )
                return child
            if ran_for >= STABLE_RUN_SECONDS:
                child.backoff = RESTART_BACKOFF_FIRST_SECONDS
            delay = child.backoff
            child.backoff = min(child.backoff * 2, RESTART_BACKOFF_MAX_SECONDS)
            child.restart_at = now + delay
            self.console.line(
                "up",
                f"{child.name} exited unexpectedly ({_describe_exit(code)}) after "
                f"{ran_for:.1f} s; restarting in {delay:.0f} s",
            )
        return None

    def stop(self, *, hurry: threading.Event) -> None:
        """SIGTERM every child in order, wait up to the grace period, SIGKILL what is left.

        ``hurry`` (a second Ctrl-C) cuts the wait short; the kill still happens, so nothing is
        left running either way.
        """
        for child in self.children:
            child.restart_at = None
            if child.running:
                assert child.process is not None
                self.console.line("up", f"stopping {child.name}")
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while any(child.running for child in self.children):
            if hurry.is_set() or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        for child in self.children:
            if child.process is None:
                continue
            if child.running:
                self.console.line("up", f"{child.name} did not stop in time; killing it")
            _kill_group(child.process.pid)
            child.process.wait()
            child.process = None
