"""Fixtures for the tests of the operator's fast paths (node watch, watched-state reads).

Real: the API emulator over HTTP (list pagination, watch resume, 410 Gone after compaction,
409 on a stale resourceVersion) and the operator's own Kubernetes client. Faked: nothing; the
tests drive the watched-state caches by hand where the runtime would feed them from watch
events, and poll with a deadline where an event has to travel over the network.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.emulated_api import api, client

__all__ = ["api", "client"]


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not true within {within} s")
        await asyncio.sleep(0.02)
