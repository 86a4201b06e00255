"""Run a function in several threads at once, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connections

T = TypeVar("T")


def run_concurrently(work: Callable[[int], T], threads: int) -> list[T]:
    """Start ``work(index)`` in ``threads`` threads released together; return their results.

    Any exception in a thread is re-raised here, after all threads finished.
    """
    start = threading.Barrier(threads)
    results: list[T] = []
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            start.wait()
            results.append(work(index))
        except BaseException as exc:  # re-raised by the caller's thread
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=run, args=(index,)) for index in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return results
