"""When the operator last saw each Node condition change, on the operator's own clock.

Staleness (`staleAfter`) and freshness of evidence are judged from these instants, never by
comparing a condition's `lastHeartbeatTime` with our clock: the node's or agent's clock may be
off by any amount (a heartbeat a year in the future is otherwise never stale; one ten minutes
behind is otherwise stale the moment we see it). kube-controller-manager's node lifecycle
controller does the same: it keeps, per node, a `probeTimestamp` taken from its own clock
(`nc.now()`) when it sees `lastHeartbeatTime` change, and "to avoid the problem with time skew
across the cluster" never uses the remote time itself; a node it has no entry for gets
`probeTimestamp = now` ("Missing timestamp for Node. Assuming now as a timestamp";
kubernetes/kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go,
`tryUpdateNodeHealth`). client-go's leader election judges a Lease the same way.

A change here is any change of a condition's heartbeat, status or reason (a message or
transition time alone is not a sign of life). The memory is the process's own: after an
operator restart every condition is first seen again, so staleness restarts from that first
sight (a silent agent is judged `staleAfter` after the restart, not at once), exactly as the
node lifecycle controller's grace period restarts with kube-controller-manager.

It also keeps, per node, the instant its first watched condition would go stale if nothing
changed (`windows`: the smallest `staleAfter` per condition type): going stale is an event no
watch delivers, so the runtime wakes the node's policies at that instant (`due`).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.engine import nodes

_Signature = tuple[object, object, object]
"""(lastHeartbeatTime, status, reason) as the API gave them (raw values, compared only)."""
_UNSURE = datetime(1, 1, 1, tzinfo=UTC)
"""`_observe_moved` cannot tell: look at every condition (compared by identity only)."""
_TICK = timedelta(microseconds=1)
"""A condition is stale once MORE than its window passed: from the instant after it."""


class ConditionClock:
    """Per node and condition type: the signature last seen and when it last changed."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, tuple[_Signature, datetime]]] = {}
        self._windows: Mapping[str, timedelta] = {}
        self._deadline: dict[str, datetime] = {}
        """By node: the instant its first windowed condition goes stale, unless it changes."""
        self._heap: list[tuple[datetime, str]] = []
        self.sooner = False
        """Set when a deadline earlier than every other was added (the caller's timer must
        be re-armed); the caller clears it."""

    def observe(
        self,
        name: str,
        node: Mapping[str, Any],
        now: datetime,
        types: Collection[str] | None = None,
        moved: Sequence[int] | None = None,
    ) -> datetime | None:
        """Note the node's conditions (of `types` only, if given) as seen at `now`.

        A condition whose heartbeat, status or reason differs from what was last seen (or that
        was never seen) is stamped `now`; the others keep their instant. Conditions no longer
        on the node are forgotten (if one comes back, that is a first sight). Returns the
        oldest instant a renewed condition had before this call (None: nothing renewed that
        had been seen before): the caller judges from it whether a staleness just ended.

        `moved`: the caller vouches that only the conditions at these places of
        `status.conditions` changed since the node was last observed with these `types`, each
        keeping its type (`handlers.node_trim.heartbeat` says so of a heartbeat). Only
        those are looked at, with the same outcome (the node cache's path for every heartbeat:
        rebuilding the node's record cost more than the rest of the event's timing).
        """
        before = self._seen.get(name)
        if moved is not None and before is not None and types is not None:
            quick = self._observe_moved(name, before, node, now, types, moved)
            if quick is not _UNSURE:
                return quick
        raw = node.get("status")
        conditions = raw.get("conditions") if isinstance(raw, Mapping) else None
        after: dict[str, tuple[_Signature, datetime]] = {}
        renewed: datetime | None = None
        if isinstance(conditions, list):
            for item in conditions:
                if type(item) is not dict and not isinstance(item, Mapping):
                    continue
                type_ = item.get("type")
                if not isinstance(type_, str) or type_ in after:
                    continue  # the first of a type, as `engine.nodes.to_view` reads
                if types is not None and type_ not in types:
                    continue
                signature = (
                    item.get("lastHeartbeatTime"),
                    item.get("status"),
                    item.get("reason"),
                )
                known = before.get(type_) if before is not None else None
                if known is not None and known[0] == signature:
                    after[type_] = known
                    continue
                after[type_] = (signature, now)
                if known is not None and (renewed is None or known[1] < renewed):
                    renewed = known[1]
        if types is not None and before is not None:
            # Types outside `types` are not looked at this time: keep what is known of them.
            for type_, known in before.items():
                if type_ not in types and type_ not in after:
                    after[type_] = known
        self._seen[name] = after
        if self._windows:
            self._schedule(name, now)
        return renewed

    def _observe_moved(
        self,
        name: str,
        known: dict[str, tuple[_Signature, datetime]],
        node: Mapping[str, Any],
        now: datetime,
        types: Collection[str],
        moved: Sequence[int],
    ) -> datetime | None:
        """`observe` from the moved places alone; `_UNSURE` when the full look is needed (a
        moved condition of a timed type never seen: a first sight, which `observe` makes)."""
        status = node.get("status")
        conditions = status.get("conditions") if type(status) is dict else None
        if type(conditions) is not list:
            return _UNSURE
        renewed: datetime | None = None
        stamps: list[tuple[str, _Signature]] = []
        for place in moved:  # (plain loops: this runs for every heartbeat)
            item = conditions[place]
            type_ = item.get("type") if type(item) is dict else None
            if type(type_) is not str or type_ not in types:
                continue  # not timed (`observe` skips it too)
            if not nodes.first_of_type(conditions, place, type_):
                continue  # `observe` times the first of a type only
            was = known.get(type_)
            if was is None:
                return _UNSURE
            signature = (item.get("lastHeartbeatTime"), item.get("status"), item.get("reason"))
            if was[0] == signature:
                continue
            stamps.append((type_, signature))
            if renewed is None or was[1] < renewed:
                renewed = was[1]
        for type_, signature in stamps:
            known[type_] = (signature, now)
        if stamps and self._windows:
            self._schedule(name, now)
        return renewed

    def times(self, name: str) -> Mapping[str, datetime]:
        """When each condition of the node was last seen to change, by type."""
        seen = self._seen.get(name)
        if not seen:
            return {}
        return {type_: at for type_, (_, at) in seen.items()}

    def forget(self, name: str) -> None:
        """The node is gone: a node later created under the same name is a first sight."""
        self._seen.pop(name, None)
        self._deadline.pop(name, None)

    # Going stale ---------------------------------------------------------------------------

    @property
    def windows(self) -> Mapping[str, timedelta]:
        """By condition type: the smallest `staleAfter` any policy gives it."""
        return self._windows

    @windows.setter
    def windows(self, windows: Mapping[str, timedelta]) -> None:
        if dict(windows) == dict(self._windows):
            return
        self._windows = dict(windows)
        self._deadline.clear()
        self._heap.clear()
        for name in self._seen:
            self._schedule(name)

    def _schedule(self, name: str, now: datetime | None = None) -> None:
        """The node's next deadline: the earliest of its conditions' going stale, of those
        not stale yet at `now` (a stale one was reported already; None: all of them)."""
        windows = self._windows
        seen = self._seen.get(name) or {}
        deadline: datetime | None = None
        for type_, (_, at) in seen.items():
            window = windows.get(type_)
            if window is None:
                continue
            goes = at + window + _TICK
            if (now is None or goes > now) and (deadline is None or goes < deadline):
                deadline = goes
        current = self._deadline.get(name)
        if current is not None and now is not None and current <= now:
            # Due and not reported yet (`observe` ran before the runtime's timer called
            # `due`): keep it, or the node would never be woken for it. `due` reports it
            # (a condition renewed meanwhile makes that a wake-up that finds nothing) and then
            # schedules the next.
            return
        if deadline is None:
            self._deadline.pop(name, None)
            return
        if current == deadline:
            return
        self._deadline[name] = deadline
        heap = self._heap
        if not heap or deadline < heap[0][0]:
            self.sooner = True
        heapq.heappush(heap, (deadline, name))
        if len(heap) > 2 * len(self._deadline) + 1024:  # superseded entries: compact
            self._heap = [(at, n) for n, at in self._deadline.items()]
            heapq.heapify(self._heap)

    def next_deadline(self) -> datetime | None:
        """The earliest instant a node's condition goes stale if nothing changes (None: no
        node has a condition any `staleAfter` watches)."""
        heap, deadline = self._heap, self._deadline
        while heap and deadline.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded by a newer observation
        return heap[0][0] if heap else None

    def due(self, now: datetime) -> list[str]:
        """Nodes a condition of which went stale by `now` (each reported once, until it is
        seen to change again)."""
        out: list[str] = []
        deadline = self._deadline
        while self._heap and self._heap[0][0] <= now:
            at, name = heapq.heappop(self._heap)
            if deadline.get(name) == at:
                del deadline[name]
                out.append(name)
                self._schedule(name, now)  # its other conditions may go stale later
        return out
