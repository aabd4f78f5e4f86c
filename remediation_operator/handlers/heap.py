"""Take the fleet the operator caches at start-up out of the garbage collector's full scans.

CPython's full (generation 2) collection visits every container object the process holds. At
10,000 real-size Nodes the caches hold about 200,000 of them, and a full collection took
150-215 ms of CPU, during which the event loop stands still: it was the p99 tail of the
condition-to-cordon latency (docs/performance.md, "Why the tail grew at real size", and item
20). Those objects live as long as the process or die by reference counting (JSON data has no
cycles), so the collector has nothing to find among them. `gc.freeze()` moves every object
tracked at that moment to a permanent generation that collections skip, as Instagram's web
servers do before forking (https://docs.python.org/3/library/gc.html#gc.freeze; the
standard library's own advice is for forked children, the effect on the scans is the same).

Done once, when the caches are first synced, after one full collection (so that cyclic
garbage from start-up is not frozen with the rest). What is frozen is never collected by the
cycle collector again: a cycle of objects that existed at that moment and becomes garbage
later is kept (reference counting still frees everything else). Objects made later are
collected as always; a relist of the Nodes (410 Gone) builds young bodies again, which
full collections then scan until the process restarts.
"""

from __future__ import annotations

import gc
import time
from typing import Any


def settle(log: Any) -> None:
    """Collect once, then freeze everything the process holds (the module docstring)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info(
        "heap_frozen",
        objects=gc.get_freeze_count(),
        pause_ms=round((time.perf_counter() - started) * 1000, 1),
    )
