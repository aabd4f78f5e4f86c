"""What must hold after a run that tried to break the operator, checked from the emulator's
request log (writes by the operator's user), a replay of every Remediation version the store
committed, and the final objects. Shared by the crash, fault and two-replica suites."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from remediation_emulator.requestlog import Entry
from remediation_operator.domain.policy import Action
from remediation_operator.k8s import executors, names
from tests.integration.conftest import Cluster

LADDER = ["Cordon", "Drain", "GPUReset", "Reboot", "Replace"]
DISRUPTIVE = {"Drain", "GPUReset", "Reboot", "Replace"}
TERMINAL = {"Succeeded", "Failed", "Cancelled"}


@dataclass
class Replay:
    """Every committed version of every Remediation, in commit order (a store watch)."""

    versions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)
    """`time.monotonic()` when each version was committed (same order as `versions`)."""
    jobs_created: Counter[str] = field(default_factory=Counter)
    """Executor Jobs by name: how many times one was created (a store watch)."""
    peak_disrupted: int = 0

    def disrupted(self, latest: dict[str, dict[str, Any]]) -> int:
        """Nodes counted by the budget: from the first disruptive step until the end."""
        count = 0
        for status in latest.values():
            if status.get("phase") in TERMINAL:
                continue
            if any(s.get("action") in DISRUPTIVE for s in status.get("steps") or []):
                count += 1
        return count

    def first_started(self, action: str) -> dict[str, float]:
        """When each Remediation was first seen with a step `action` recorded."""
        out: dict[str, float] = {}
        for (name, status), at in zip(self.versions, self.seen_at, strict=True):
            if name not in out and any(
                s.get("action") == action for s in status.get("steps") or []
            ):
                out[name] = at
        return out

    def peaks(self) -> list[int]:
        latest: dict[str, dict[str, Any]] = {}
        out = []
        for name, status in self.versions:
            latest[name] = status
            out.append(self.disrupted(latest))
        return out


@contextlib.asynccontextmanager
async def replaying(cluster: Cluster) -> AsyncIterator[Replay]:
    """Record every Remediation version and every Job creation the store commits."""
    replay = Replay()
    store = cluster.api.store.raw  # shared objects: copied below, never mutated
    remediations = store.watch("remediations")
    jobs = store.watch("jobs")

    async def follow_remediations() -> None:
        while (item := await remediations.queue.get()) is not None:
            kind, obj, _ = item
            status = copy.deepcopy(obj.get("status") or {})
            if kind == "DELETED":
                status["phase"] = "Cancelled"  # gone: no longer counts
            replay.versions.append((obj["metadata"]["name"], status))
            replay.seen_at.append(time.monotonic())

    async def follow_jobs() -> None:
        while (item := await jobs.queue.get()) is not None:
            kind, obj, _ = item
            labels = obj["metadata"].get("labels") or {}
            if kind == "ADDED" and labels.get(names.MANAGED_BY) == names.MANAGER:
                replay.jobs_created[obj["metadata"]["name"]] += 1

    tasks = [asyncio.create_task(follow_remediations()), asyncio.create_task(follow_jobs())]
    try:
        yield replay
    finally:
        await asyncio.sleep(0.05)
        store.unwatch("remediations", remediations)
        store.unwatch("jobs", jobs)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        replay.peak_disrupted = max(replay.peaks(), default=0)


def successful(entries: Iterable[Entry], verb: str, resource: str) -> Counter[str]:
    return Counter(
        e.name for e in entries if e.verb == verb and e.resource == resource and e.code < 300
    )


def check_ladder_run(
    cluster: Cluster,
    users: set[str],
    faulty: list[str],
    replay: Replay,
    budget: int,
) -> list[str]:
    """Every violation found (empty: the run was clean)."""
    problems: list[str] = []
    writes = [e for e in cluster.api.request_log if e.is_write and e.user in users]
    jobs = replay.jobs_created
    claims = successful(writes, "delete", "nodeclaims")
    expected_jobs: set[str] = set()
    for node in faulty:
        remediation = cluster.remediation(node)
        if remediation is None:
            problems.append(f"{node}: no Remediation")
            continue
        name = remediation["metadata"]["name"]
        status = remediation["status"]
        steps = status.get("steps") or []
        actions = [s["action"] for s in steps]
        if status.get("phase") != "Succeeded" or status.get("reason") != "NodeReplaced":
            problems.append(f"{name}: ended {status.get('phase')}/{status.get('reason')}")
        if actions != LADDER:
            problems.append(f"{name}: steps {actions} (a step skipped or repeated)")
        for step in steps:
            if not step.get("startedAt") or not step.get("finishedAt"):
                problems.append(f"{name}: step {step['action']} has an incomplete record")
        outcomes = [s.get("outcome") for s in steps[:4]]
        if outcomes != ["Succeeded"] * 4:
            problems.append(f"{name}: outcomes {outcomes}")
        starts = [s.get("startedAt") or "" for s in steps]
        if starts != sorted(starts):
            problems.append(f"{name}: steps out of order")
        for step in steps:
            if step["action"] in ("GPUReset", "Reboot"):
                expected_jobs.add(executors.job_name(name, Action(step["action"]), step["attempt"]))
        if len(cluster.remediations(node)) != 1:
            seen = [
                (
                    r["metadata"]["name"],
                    (r.get("status") or {}).get("phase"),
                    (r.get("status") or {}).get("reason"),
                )
                for r in cluster.remediations(node)
            ]
            problems.append(f"{node}: {len(seen)} Remediations {seen}")
    if set(jobs) != expected_jobs:
        problems.append(f"executor Jobs created {sorted(jobs)}, steps say {sorted(expected_jobs)}")
    problems += [f"Job {j} created {n} times" for j, n in jobs.items() if n > 1]
    problems += [f"NodeClaim {c} deleted {n} times" for c, n in claims.items() if n > 1]
    if len(claims) != len(faulty):
        problems.append(f"{len(claims)} NodeClaims deleted for {len(faulty)} faulty nodes")
    if replay.peak_disrupted > budget:
        problems.append(f"budget {budget} exceeded: {replay.peak_disrupted} nodes disrupted")
    problems += leftovers(cluster)
    return problems


def leftovers(cluster: Cluster) -> list[str]:
    """Anything of ours on a node once no Remediation is open."""
    problems = []
    for node in cluster.api.store.list("nodes"):
        name = node["metadata"]["name"]
        spec = node.get("spec") or {}
        annotations = node["metadata"].get("annotations") or {}
        labels = node["metadata"].get("labels") or {}
        if any(t.get("key") == names.QUARANTINE_TAINT for t in spec.get("taints") or []):
            problems.append(f"{name}: our taint left behind")
        if spec.get("unschedulable"):
            problems.append(f"{name}: left cordoned")
        if names.DO_NOT_DISRUPT in annotations:
            problems.append(f"{name}: do-not-disrupt left behind")
        if names.REPLACE_REQUESTED in labels:
            problems.append(f"{name}: replace-requested left behind")
    return problems
