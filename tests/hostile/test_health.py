"""`/healthz` tells the kubelet when the process can no longer work (issue 24, item 2): the
real operator process against the emulator, whose Node watch goes quiet (the next stream
hangs before its first byte, as behind a broken proxy) for longer than the quiet limit;
`/healthz` fails naming the watch, and passes again once events flow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.integration.conftest import Cluster, Operator, cordon_only, eventually, policy

pytestmark = pytest.mark.hostile


async def test_a_quiet_node_watch_fails_healthz_until_events_flow_again(cluster: Cluster) -> None:
    cluster.apply(policy(faults=cordon_only()))
    # The first Node watch stream ends after 30 events (the fleet's heartbeats: seconds);
    # the one opened next hangs 8 s before its first byte.
    cluster.api.faults.drop_watch(resource="nodes", after_events=30)
    operator = await cluster.start_operator("operator-a", "--watch-quiet-limit", "3s")
    assert await operator.probe("/healthz") == 200
    cluster.api.faults.delay(8.0, verb="watch", resource="nodes", times=1)

    await eventually(
        _status_is(operator, 503), what="/healthz failing while the watch is quiet", within=15
    )
    await eventually(_status_is(operator, 200), what="/healthz ok again", within=20)
    assert '"task": "node-watch"' not in operator.log.read_text()  # quiet, not dead


def _status_is(operator: Operator, code: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await operator.probe("/healthz") == code

    return check
