"""``manage.py up``: its supervisor with small real children, and the whole service end to end."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from django.conf import settings
from django.core.management.base import OutputWrapper

from config import supervisor as supervision
from config.embedded import EmbeddedLayout, postgres_stop
from config.embedded_redis import redis_stop
from config.supervisor import Child, Console, Supervisor

HEALTHY_TIMEOUT_SECONDS = 90
STOP_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class _Response:
    status: int
    content_type: str
    body: bytes


def _get(url: str) -> _Response:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (local URL)
            return _Response(response.status, response.headers["Content-Type"], response.read())
    except urllib.error.HTTPError as error:
        return _Response(error.code, error.headers["Content-Type"], error.read())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _up_env(data_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "AGENT_MEMORY_ADMIN_PASSWORD"}
    }
    # pytest-django put the test settings in the environment; `up` runs the real ones.
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["AGENT_MEMORY_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _up(data_dir: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "up", "--demo", "--bind", f"127.0.0.1:{port}"],
        cwd=settings.BASE_DIR,
        env=_up_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


class _Output:
    """Collects a process's output on a thread, so its pipe never fills up and blocks it."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _references(process: psutil.Process, data_dir: Path) -> bool:
    """Whether a live process was started for this data folder (by argument or environment)."""
    with contextlib.suppress(psutil.Error):
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if any(str(data_dir) in part for part in process.cmdline()):
            return True
        return bool(process.environ().get("AGENT_MEMORY_DATA_DIR") == str(data_dir))
    return False


def _survivors(data_dir: Path, seen: list[psutil.Process]) -> list[psutil.Process]:
    """Live processes of this data folder: ones seen while `up` ran, and any that name it.

    psutil.Process objects remember their start time, so a reused pid never counts.
    """
    found = {}
    candidates = [*seen, *(p for p in psutil.process_iter() if _references(p, data_dir))]
    for process in candidates:
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found[process.pid] = process
    return list(found.values())


def _server_processes(data_dir: Path) -> list[psutil.Process]:
    """The daemonised PostgreSQL and Redis, which are not descendants of `up`."""
    processes = []
    for pidfile in (data_dir / "postgres" / "postmaster.pid", data_dir / "redis" / "redis.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError, psutil.Error):
            processes.append(psutil.Process(int(pidfile.read_text().split()[0])))
    return processes


def _wait_healthy(base_url: str, up: subprocess.Popen[str], output: _Output) -> dict[str, Any]:
    deadline = time.monotonic() + HEALTHY_TIMEOUT_SECONDS
    last: object = None
    while time.monotonic() < deadline:
        assert up.poll() is None, f"up exited early with {up.returncode}:\n{output.text}"
        try:
            response = _get(f"{base_url}/healthz")
            report: dict[str, Any] = json.loads(response.body)
            if response.status == 200:
                return report
            last = report
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    pytest.fail(f"not healthy after {HEALTHY_TIMEOUT_SECONDS} s: {last}\n{output.text}")


@pytest.mark.slow
def test_up_runs_the_whole_service_and_stops_cleanly_on_ctrl_c():
    data_dir = Path(tempfile.mkdtemp(prefix="am-", dir="/tmp"))  # short: Unix socket paths
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    up = _up(data_dir, port)
    output = _Output(up)
    seen: list[psutil.Process] = []
    try:
        report = _wait_healthy(base_url, up, output)
        assert report["checks"]["database"]["ok"]
        assert report["checks"]["redis"]["ok"]
        assert report["checks"]["worker"]["ok"]
        seen += psutil.Process(up.pid).children(recursive=True)
        seen += _server_processes(data_dir)
        assert len(seen) >= 5, seen  # gunicorn, its workers, Celery worker and beat, servers
        # The search by data folder finds the same processes, servers included.
        assert {p.pid for p in seen} <= {p.pid for p in _survivors(data_dir, [])}
        # More request threads than an ingest's usual connections: searches must not queue
        # behind batch stores waiting for the embedder.
        web = [p.cmdline() for p in seen if "gunicorn" in " ".join(p.cmdline())]
        assert web
        assert all("--threads" in line for line in web)
        assert {line[line.index("--threads") + 1] for line in web} == {"8"}

        second = subprocess.run(
            [sys.executable, "manage.py", "up", "--bind", f"127.0.0.1:{_free_port()}"],
            cwd=settings.BASE_DIR,
            env=_up_env(data_dir),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1
        assert "already running on this data folder" in second.stderr
        assert f"pid {up.pid}" in second.stderr

        login = _get(f"{base_url}/login/")
        assert login.status == 200
        assert login.content_type.startswith("text/html")
        css = _get(f"{base_url}/static/admin/css/base.css")
        assert css.status == 200
        assert css.content_type.startswith("text/css")
        assert len(css.body) > 1000

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=STOP_TIMEOUT_SECONDS) == 0, output.text
        # PID 1 may take a moment to reap the daemonised servers; zombies do not count.
        deadline = time.monotonic() + 10
        while _survivors(data_dir, seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _survivors(data_dir, seen) == []
        assert "healthy in" in output.text
        assert "Admin password for 'admin'" in output.text
    finally:
        _kill_everything(up, data_dir, seen)
        shutil.rmtree(data_dir, ignore_errors=True)


def _kill_everything(up: subprocess.Popen[str], data_dir: Path, seen: list[psutil.Process]) -> None:
    """After a failure, leave nothing running that this test started."""
    if up.poll() is None:
        up.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(timeout=STOP_TIMEOUT_SECONDS)
    if up.poll() is None:
        up.kill()
        up.wait()
    layout = EmbeddedLayout(data_dir)
    with contextlib.suppress(Exception):
        redis_stop(layout)
    with contextlib.suppress(Exception):
        postgres_stop(layout)
    for process in _survivors(data_dir, seen):
        with contextlib.suppress(psutil.Error):
            process.kill()


# --- Supervisor, with small real child processes -----------------------------------------------


def _supervisor(*children: Child) -> tuple[Supervisor, io.StringIO]:
    out = io.StringIO()
    console = Console(OutputWrapper(out))
    return Supervisor(list(children), env=dict(os.environ), console=console), out


def _pid(child: Child) -> int:
    assert child.process is not None
    return child.process.pid


def test_it_restarts_a_crashing_child_then_gives_up(monkeypatch):
    monkeypatch.setattr(supervision, "RESTART_BACKOFF_MAX_SECONDS", 0.05)
    script = "print('boom', flush=True); raise SystemExit(3)"
    flaky = Child("flaky", [sys.executable, "-c", script], backoff=0.01)
    supervisor, out = _supervisor(flaky)
    supervisor.start()

    failed = None
    deadline = time.monotonic() + 20
    while failed is None and time.monotonic() < deadline:
        failed = supervisor.check()
        time.sleep(0.02)

    assert failed is flaky
    time.sleep(0.2)  # the echo thread of the last run
    text = out.getvalue()
    assert text.count("[flaky] boom") == supervision.CRASH_LOOP_LIMIT
    assert text.count("exited unexpectedly (status 3)") == supervision.CRASH_LOOP_LIMIT - 1
    assert "giving up" in text


def test_it_doubles_the_restart_delay_up_to_the_cap(monkeypatch):
    monkeypatch.setattr(supervision, "RESTART_BACKOFF_MAX_SECONDS", 4.0)
    flaky = Child("flaky", [sys.executable, "-c", "raise SystemExit(1)"])
    supervisor, _ = _supervisor(flaky)
    delays = []
    for _ in range(4):
        supervisor._spawn(flaky)
        assert flaky.process is not None
        flaky.process.wait()
        flaky.exits.clear()  # not a crash loop: only the delays are under test
        supervisor.check()
        assert flaky.restart_at is not None
        delays.append(round(flaky.restart_at - time.monotonic()))

    assert delays == [1, 2, 4, 4]


def test_it_stops_children_and_kills_those_that_ignore_sigterm(monkeypatch):
    monkeypatch.setattr(supervision, "STOP_GRACE_SECONDS", 1.0)
    stubborn_script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    polite = Child("polite", [sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = Child("stubborn", [sys.executable, "-c", stubborn_script])
    supervisor, out = _supervisor(polite, stubborn)
    supervisor.start()
    processes = [psutil.Process(_pid(child)) for child in (polite, stubborn)]
    deadline = time.monotonic() + 10
    while "[stubborn] ready" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)

    started = time.monotonic()
    supervisor.stop(hurry=threading.Event())

    assert time.monotonic() - started < 5
    assert not any(process.is_running() for process in processes)
    assert "stubborn did not stop in time; killing it" in out.getvalue()
    assert "polite did not stop" not in out.getvalue()


def test_a_second_ctrl_c_kills_without_waiting(monkeypatch):
    stubborn_script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    stubborn = Child("stubborn", [sys.executable, "-c", stubborn_script])
    supervisor, out = _supervisor(stubborn)
    supervisor.start()
    process = psutil.Process(_pid(stubborn))
    deadline = time.monotonic() + 10
    while "[stubborn] ready" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    hurry = threading.Event()
    hurry.set()

    started = time.monotonic()
    supervisor.stop(hurry=hurry)

    assert time.monotonic() - started < supervision.STOP_GRACE_SECONDS / 2
    assert not process.is_running()
