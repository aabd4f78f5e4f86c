"""Once its caches are synced, the operator process takes what it holds out of the garbage
collector's full scans (`handlers.heap`): the pause such a scan cost at 10,000 nodes was the
tail of the condition-to-cordon latency (docs/performance.md, item 20).

Real: `handlers.heap.settle` in a Python process of its own (freezing is process-wide, so
never in the test process), and the operator process (`remediation-operator run`) against
the API emulator and its emulated fleet (tests/integration's fixtures). Faked: nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.integration.conftest import ROOT, Cluster, cluster, eventually  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def test_a_settled_heap_is_out_of_every_later_collection() -> None:
    script = textwrap.dedent(
        """
        import gc, json
        from remediation_operator.handlers import heap

        class Log:
            def info(self, event, **fields):
                print(json.dumps({"event": event, **fields}))

        fleet = {f"gpu-{i}": {"labels": {"a": "b"}, "conditions": [{"type": "Ready"}]}
                 for i in range(50_000)}
        before = len(gc.get_objects())
        heap.settle(Log())
        scanned = len(gc.get_objects())
        junk = [[] for _ in range(1_000)]
        gc.collect()
        print(json.dumps({"before": before, "scanned": scanned, "after": len(gc.get_objects()),
                          "kept": len(fleet)}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    logged, counts = (json.loads(line) for line in result.stdout.splitlines())
    assert logged["event"] == "heap_frozen"
    # Two tracked containers a node (a mapping holding only strings is not tracked at all).
    assert logged["objects"] >= 100_000, "the fleet is frozen"
    assert counts["before"] >= 100_000
    assert counts["scanned"] < 1_000, "a full collection no longer visits the fleet"
    assert counts["after"] < 3_000, "what is made later is collected as always"
    assert counts["kept"] == 50_000, "frozen objects stay usable"


async def test_the_operator_freezes_its_heap_once_its_caches_are_synced(
    cluster: Cluster,  # noqa: F811 (the imported fixture)
) -> None:
    operator = await cluster.start_operator("operator-a")

    def events() -> list[dict[str, object]]:
        lines = operator.log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    await eventually(
        lambda: any(e.get("event") == "heap_frozen" for e in events()),
        within=20,
        what="heap_frozen in the operator's log",
    )
    order = [e.get("event") for e in events()]
    assert order.index("caches_synced") < order.index("heap_frozen")
    assert order.count("heap_frozen") == 1
    [frozen] = [e for e in events() if e.get("event") == "heap_frozen"]
    assert isinstance(frozen["objects"], int)
    assert frozen["objects"] > 10_000
