#!/usr/bin/env python3
"""Fake nvidia-bug-report.sh: `--safe-mode --output-file <path>.log` writes `<path>.log.gz`.

Run from the driver's root (chroot) on a real node, so the file lands in that root's /tmp:
here under FAKE_GPU_NODE_HOST, the fake node's host root."""

from __future__ import annotations

import gzip
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _fakenode import with_state


def act(state: dict[str, Any], argv: list[str]) -> int:
    if "--output-file" not in argv:
        print("fake nvidia-bug-report.sh: --output-file is required here", file=sys.stderr)
        return 1
    if not state["driver_loaded"]:
        print("nvidia-bug-report.sh: NVIDIA driver is not loaded; partial report", file=sys.stderr)
    path = argv[argv.index("--output-file") + 1]
    root = os.environ.get("FAKE_GPU_NODE_HOST", "/")
    target = os.path.join(root, path.lstrip("/")) + ".gz"
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with gzip.open(target, "wt") as report:
        report.write("nvidia-bug-report.sh (fake)\n")
    print(f"Complete. The output file is {path}.gz")
    return 0


with_state(act)
