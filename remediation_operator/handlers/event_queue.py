"""Kubernetes Events posted in the background, so a reconcile never waits for them.

Reconciles of one policy are serialized (budgets); each fault's reconcile used to post its
Events (one or two API round trips per explanation) after the cordon, and the next fault
waited for them: the p99 fault-to-cordon tail on a busy machine (docs/performance.md).
`put` now only appends to a bounded queue; one task posts the queue in order through the
`EventRecorder`, whose deduplication (one Event per object, reason, message and type, with a
`count`) is unchanged because a single poster calls it in the original order.

Events are explanations, not state (D9): the log line and the metric of every decision are
written synchronously by the engine's recorder, and the Remediation status holds the
decision itself. So the queue is in memory only; Events still queued when the process
crashes are lost, and a full queue drops its oldest Event (counted in `dropped`) rather than
slow a reconcile down. A clean stop drains the queue within a short deadline.

What is worth an Event (docs/decisions.md D31): a fault used to cost 12 API writes, 8 of them
Events, because each of its four decisions (FaultDetected, StepStarted, StepSucceeded,
LadderExhausted) was posted on the Node and again on the Remediation. Now `worth_an_event`
and `on_the_node_only` decide:

- a decision about a node is posted once, on the Node: `kubectl describe node` and
  `kubectl get events` show it there beside the kubelet's and node-problem-detector's Events,
  and the Remediation needs no copy, since its status (steps with reason and message,
  conditions) is the incident's durable record; a policy-wide decision goes on the policy;
- the start of a Cordon is not posted: a cordon is one write, and its StepSucceeded,
  posted moments later, says the same thing to a human. Every other start is (a drain or a
  reboot takes minutes; its start is news).

The log line and the metric of every decision are unchanged (the engine's recorder).

A failed post is logged (`event_post_failed`) and retried a few times with a backoff when the
API server may accept it later (unreachable, 429, 5xx, honouring Retry-After up to a cap);
an Event about an object that is gone (404/410) is dropped silently, as before; any other
refusal (403, 422) cannot succeed on a retry and is logged and dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remediation_operator.domain.policy import Action
from remediation_operator.domain.reasons import Reason
from remediation_operator.engine.ports import Explanation
from remediation_operator.k8s.client import ApiError
from remediation_operator.k8s.events import EventRecorder, ObjectRef
from remediation_operator.observability import logs

CAPACITY = 10_000
"""Events waiting to be posted; past this the oldest is dropped."""
ATTEMPTS = 3
"""Posts of one Event, the first included, before it is given up."""
BACKOFF = 0.25
"""Seconds before the second attempt; doubled for each further one."""
MAX_BACKOFF = 2.0
"""Cap on a wait between attempts, also on the server's Retry-After (the queue waits too)."""
DROP_LOG_EVERY = 1000
"""A full queue logs its first drop and then every this many."""


@dataclass(frozen=True)
class QueuedEvent:
    """One Event to post (or count a repeat of), with what its log lines name."""

    target: ObjectRef
    reason: str
    message: str
    type_: str
    at: datetime
    policy: str = ""
    node: str = ""


def worth_an_event(explanation: Explanation) -> bool:
    """Is this decision posted as an Event at all? (Every one is logged and counted.)"""
    return not (explanation.reason is Reason.StepStarted and explanation.action is Action.Cordon)


def on_the_node_only(explanation: Explanation) -> bool:
    """A decision about a node is posted on the Node, not a second time on its Remediation."""
    return bool(explanation.node)


def _retryable(error: ApiError) -> bool:
    return error.status == 0 or error.status == 429 or error.status >= 500


class EventQueue:
    """A bounded FIFO of Events and the single task (`run`) that posts them in order."""

    def __init__(
        self,
        recorder: EventRecorder,
        *,
        capacity: int = CAPACITY,
        attempts: int = ATTEMPTS,
        backoff: float = BACKOFF,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        log: Any = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be at least 1, got {capacity}")
        if attempts < 1:
            raise ValueError(f"attempts: must be at least 1, got {attempts}")
        self._recorder = recorder
        self._capacity = capacity
        self._attempts = attempts
        self._backoff = backoff
        self._sleep = sleep
        self._log = log if log is not None else logs.get("remediation_operator.events")
        self._queue: deque[QueuedEvent] = deque()
        self._posting = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.dropped = 0
        """Events dropped, oldest first, because the queue was full (since the start)."""
        self.given_up = 0
        """Events whose posts all failed (not counting those about objects that are gone)."""

    def __len__(self) -> int:
        """Events not posted yet, the one being posted included."""
        return len(self._queue) + (1 if self._posting else 0)

    def put(self, event: QueuedEvent) -> None:
        """Queue an Event; never waits. When the queue is full the oldest one is dropped."""
        if len(self._queue) >= self._capacity:
            lost = self._queue.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % DROP_LOG_EVERY == 0:
                self._log.warning(
                    "events_dropped",
                    dropped=self.dropped,
                    capacity=self._capacity,
                    reason=lost.reason,
                    node=lost.node,
                    policy=lost.policy,
                )
        self._queue.append(event)
        self._idle.clear()
        self._wake.set()

    async def drain(self) -> None:
        """Return once every Event queued so far is posted or given up (needs `run`)."""
        while self._queue or self._posting:
            await self._idle.wait()

    async def run(self) -> None:
        """Post queued Events in order, until cancelled."""
        while True:
            if not self._queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            event = self._queue.popleft()
            self._posting = True
            try:
                await self._post(event)
            finally:
                self._posting = False

    async def _post(self, event: QueuedEvent) -> None:
        for attempt in range(1, self._attempts + 1):
            try:
                await self._recorder.record(
                    event.target, event.reason, event.message, event.type_, event.at
                )
                return
            except ApiError as error:
                if error.status in (404, 410):
                    return  # the object (or the namespace) is gone: nothing to explain
                retrying = _retryable(error) and attempt < self._attempts
                self._failed(event, attempt, retrying, status=error.status, error=str(error))
                if not retrying:
                    return
                wait = min(self._backoff * 2 ** (attempt - 1), MAX_BACKOFF)
                if error.retry_after:
                    wait = max(wait, min(error.retry_after, MAX_BACKOFF))
            except Exception as error:  # a bug must not stop every later Event
                self._failed(event, attempt, False, error=repr(error))
                return
            await self._sleep(wait)

    def _failed(self, event: QueuedEvent, attempt: int, retrying: bool, **fields: Any) -> None:
        if not retrying:
            self.given_up += 1
        self._log.warning(
            "event_post_failed",
            reason=event.reason,
            node=event.node,
            policy=event.policy,
            object=f"{event.target.kind}/{event.target.name}",
            attempt=attempt,
            retrying=retrying,
            **fields,
        )
