"""Owned background tasks: every task has a name, a reference that keeps it alive, and a logged failure."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from proxy.logs import get_logger

_tasks: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
    """Start a task the proxy owns: kept referenced until done, failures logged with its name."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _tasks.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _tasks.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        get_logger().error("task_failed", task=task.get_name(), error=repr(exc))


def running() -> int:
    """How many owned tasks are alive (tests assert they drain)."""
    return len(_tasks)
