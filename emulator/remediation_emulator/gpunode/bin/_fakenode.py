"""Shared by the fake node's executables (stdlib only): load and save the state file."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Callable
from typing import Any


def with_state(act: Callable[[dict[str, Any], list[str]], int]) -> None:
    path = os.environ.get("FAKE_GPU_NODE")
    if not path:
        print("fake GPU node: FAKE_GPU_NODE is not set", file=sys.stderr)
        raise SystemExit(255)
    with open(path, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        state = json.load(handle)
        argv = sys.argv[1:]
        state.setdefault("calls", []).append([os.path.basename(sys.argv[0]), *argv])
        code = act(state, argv)
        handle.seek(0)
        handle.truncate()
        json.dump(state, handle, indent=1)
    raise SystemExit(code)
