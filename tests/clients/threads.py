"""``asyncio.run`` (in these tests and in the docs' examples) needs a thread with no running
event loop; an earlier test of the same run (Playwright's sync API) may leave one running on the
main thread. So they run on a thread of their own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def in_fresh_thread(function: Callable[[], T]) -> T:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function()
        except BaseException as exc:  # re-raised on the caller's thread, pytest.fail included
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    return in_fresh_thread(lambda: asyncio.run(coroutine))
