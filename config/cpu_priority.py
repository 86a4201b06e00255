"""Background work's CPU priority: below every request, by niceness and scheduling policy.

Niceness only shrinks a thread's share of a busy core. On Linux 6.6 and later (EEVDF) a request
thread that wakes (its SQL answered, its query embedded) may still wait for a niced thread to
finish its time slice, and a search wakes about ten times. Under ``SCHED_IDLE`` the kernel takes
the core from the background thread at once for any other thread that wants it; the background
work still runs whenever a core is free (bench/locomo_api.py --mixed-ingest, docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings

logger = logging.getLogger(__name__)


def background_priority_take(niceness: int) -> None:
    """The calling thread's niceness raised to ``niceness`` (never lowered: a Celery pool process
    is niced already, and lowering it back would need privileges), and, with
    ``BACKGROUND_IDLE_POLICY``, the idle scheduling policy. Threads it starts later inherit
    both. Where the system has neither (not Linux), nothing changes."""
    if not hasattr(os, "setpriority"):
        return
    thread = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, thread, max(niceness, os.getpriority(os.PRIO_PROCESS, thread)))
    if settings.BACKGROUND_IDLE_POLICY and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError as exc:  # a sandbox that refuses the call (seccomp, gVisor): niceness only
            logger.warning("background work keeps the normal scheduling policy: %s", exc)
