"""The operator process's state and wiring: caches, per-policy workers, leadership, metrics.

kopf handlers (in `kopf_handlers`) only hand watch events to this object; everything that
writes to the cluster runs in the per-policy workers, and only while this replica holds the
leader Lease. Readiness means "caches synced": the first full list of Nodes, policies and
Remediations is in memory (a non-leader replica is ready too).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.policy import Action, Policy
from remediation_operator.engine import nodes as node_views
from remediation_operator.engine import ownership, reconciler
from remediation_operator.engine.ports import Ports
from remediation_operator.engine.reconciler import Reconciled
from remediation_operator.handlers import node_watch, policies
from remediation_operator.handlers.cluster_port import KubernetesCluster
from remediation_operator.handlers.drain_watch import DrainWatches
from remediation_operator.handlers.job_retention import JobJanitor, JobKey
from remediation_operator.handlers.node_cache import NodeCache
from remediation_operator.handlers.node_watch import NodeWatch
from remediation_operator.handlers.record_port import KubernetesRecords
from remediation_operator.handlers.recorder import Recorder
from remediation_operator.handlers.retention import Janitor
from remediation_operator.handlers.supervision import Supervisor
from remediation_operator.handlers.workers import PolicyWorker, Round
from remediation_operator.k8s import leader, names, records
from remediation_operator.k8s.client import ApiError, Client, path
from remediation_operator.k8s.events import EventRecorder
from remediation_operator.observability import logs
from remediation_operator.observability.metrics import Metrics

SYNC_RETRY = timedelta(seconds=2)
WRITERS = frozenset({"events", "policy-status-writes"})
"""Background writers stopped after their last flush, not with the other tasks."""
TERMINAL_PHASES = ("Succeeded", "Failed", "Cancelled")


@dataclass(frozen=True)
class Settings:
    namespace: str
    lease_name: str
    identity: str
    timings: leader.Timings
    retention: timedelta
    job_templates: Mapping[Action, Mapping[str, Any]]
    executor_namespace: str = ""
    """Where GPU-reset and reboot Jobs run (privileged pods); empty: `namespace`."""
    job_retention: timedelta = timedelta(hours=1)
    """An executor Job is deleted this long after its step ended (`--job-retention`)."""
    watch_quiet: timedelta = node_watch.QUIET
    """`/healthz` fails when the Node watch delivered nothing this long."""


def _concerns(
    policy: Policy | None, before: Mapping[str, str] | None, after: Mapping[str, str]
) -> bool:
    """Could a change of a Node labelled `before` -> `after` matter to `policy`: it selects the
    node, or did before the change (its Remediation there must then close). A policy whose
    selector does not match the node is not woken at all: with one policy per GPU pool, a
    fault wakes one worker, not all."""
    if policy is None:
        return True
    selector = policy.node_selector
    return selector.matches(after) or (before is not None and selector.matches(before))


def _now() -> datetime:
    return datetime.now(UTC)


class Runtime:
    def __init__(self, client: Client, settings: Settings, metrics: Metrics) -> None:
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.log = logs.get("remediation_operator.runtime", identity=settings.identity)
        self.nodes = NodeCache()
        self._stale_timer = asyncio.Event()
        """Set when a condition may go stale sooner than the timer was armed for."""
        self.nodes.on_sooner = self._stale_timer.set
        self.workers: dict[str, PolicyWorker] = {}
        self.acceptances: dict[str, policies.Acceptance] = {}
        self._status_written: dict[str, policies.Acceptance] = {}
        self._approvals: dict[str, str] = {}
        self._finished_jobs: set[str] = set()
        self._draining_by: dict[str, str] = {}
        self._first_seen: dict[str, datetime] = {}
        self._snapshot_at: dict[str, datetime] = {}
        """Relevant node changes not yet seen by a plan (for the reaction-time metric)."""
        self._open: dict[str, dict[str, str]] = {}
        """By node: its open (non-terminal) Remediations, name -> policy. Ownership is sticky
        to them (engine.ownership); fed by the watch and by our own writes."""
        self._overlap = asyncio.Lock()
        """Held by the reconcile of a policy whose nodes another policy also claims: two such
        reconciles never interleave, so neither opens an incident the other is opening."""
        self.supervisor = Supervisor(on_restart=metrics.task_restarted, log=self.log)
        """Runs every background task of the process; `/healthz` asks it (`problems`)."""
        self.synced = False
        self.on_synced: Callable[[], None] = lambda: None
        """Called once, when the caches are first synced (the process freezes its heap then:
        `handlers.heap`)."""
        self._stopped = False
        self.elector = leader.Elector(
            client,
            namespace=settings.namespace,
            name=settings.lease_name,
            identity=settings.identity,
            timings=settings.timings,
            on_change=self._leadership,
            log=self.log,
        )
        # Events and summary-only policy status writes go out in the background (p99 tail).
        self.records = KubernetesRecords(
            client,
            EventRecorder(client, settings.identity),
            node_uid=self.nodes.uid,
            leading=lambda: self.elector.leading,
        )
        events, status_writes = self.records.events, self.records.status_writes
        client.observe = metrics.api_request  # API requests by verb and code, watch restarts
        metrics.queues(lambda: {name: w.queued for name, w in self.workers.items()})
        metrics.background_writes(
            events_queued=lambda: len(events),
            events_lost=lambda: {"queue_full": events.dropped, "refused": events.given_up},
            status_pending=lambda: len(status_writes),
        )
        self.ports = Ports(
            cluster=KubernetesCluster(
                client,
                settings.executor_namespace or settings.namespace,
                settings.job_templates,
                node_body=self.nodes.body,
                on_cordoned=self._cordoned,
            ),
            records=self.records,
            recorder=Recorder(metrics),
        )
        self.janitor = Janitor(
            settings.retention,
            lambda name, rv: records.delete_remediation(client, name, rv),
            lambda: self.elector.leading,
            log=self.log,
        )
        self.job_janitor = JobJanitor(
            settings.job_retention, self._delete_job, self._may_act, log=self.log
        )
        self.drains = DrainWatches(
            client, self._pods_changed, log=self.log, supervisor=self.supervisor
        )
        # Nodes bypass kopf (the hot path: see node_watch); policies, Remediations, Jobs don't.
        self.node_watch = NodeWatch(client, self.node_event, log=self.log)
        self.node_watch.on_progress = self.supervisor.beater("node-watch")
        metrics.leadership(False)

    # Lifecycle -------------------------------------------------------------------------------

    def ready(self) -> bool:
        return self.synced

    def leading(self) -> bool:
        return self.elector.leading

    def problems(self) -> list[str]:
        """Why this process cannot work any more (a task that stays down, a watch that went
        quiet); `/healthz` fails while there is one, so the kubelet restarts the process."""
        return self.supervisor.problems()

    def _may_act(self) -> bool:
        """Workers plan only as leader AND after the initial sync: kopf may deliver a policy
        before the first full Node list is in, and a plan on an empty node cache would close
        every open incident as NodeDeleted (found by tests/reliability/test_crash.py)."""
        return self.synced and self.elector.leading

    async def start(self) -> None:
        self.records.start(self.supervisor.spawn)
        self._spawn("leader-election", self.elector.run)
        self._spawn("retention", self.janitor.run)
        self._spawn("job-retention", self.job_janitor.run)
        self.supervisor.spawn("node-watch", self.node_watch.run, quiet=self.settings.watch_quiet)
        self.supervisor.spawn("initial-sync", self._initial_sync, once=True)
        self._spawn("staleness", self._staleness)

    async def stop(self) -> None:
        """Stop workers and watches, then release the Lease (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        await self.supervisor.stop(keep=WRITERS)
        await self.records.stop()  # queued Events, pending status writes: still as leader
        await self.supervisor.stop()
        await self.drains.close()
        await self.elector.release()
        self.metrics.leadership(False)
        self.log.info("operator_stopped")

    def _accept_soon(self, name: str) -> None:
        """Write the policy's Accepted condition in the background (once per change)."""
        self._spawn(f"accept/{name}", functools.partial(self._write_acceptance, name), once=True)

    def _spawn(self, name: str, run: Callable[[], Any], *, once: bool = False) -> None:
        if not self._stopped:
            self.supervisor.spawn(name, run, once=once)

    async def _initial_sync(self) -> None:
        """List everything once so that plans never run on a partial picture."""
        while True:
            try:
                listed_policies = await records.list_policies(self.client)
                listed_remediations = await records.list_remediations(self.client)
                break
            except ApiError as error:
                self.log.warning("initial_sync_failed", error=str(error))
                await asyncio.sleep(SYNC_RETRY.total_seconds())
        for body in listed_remediations:
            self.remediation_event("ADDED", body)
        for body in listed_policies:
            self.policy_event("ADDED", body)
        # Open Remediations whose policy was deleted while no replica was running (D13).
        known = {str((p.get("metadata") or {}).get("name")) for p in listed_policies}
        for body in listed_remediations:
            owner = str((body.get("spec") or {}).get("policyName") or "")
            open_ = (body.get("status") or {}).get("phase") not in TERMINAL_PHASES
            if open_ and owner and owner not in known and owner not in self.workers:
                self._farewell(owner, None)
        await self.node_watch.listed.wait()  # its first full list is in the node cache
        self.metrics.quarantined(self.nodes.quarantined())
        self.records.synced = True  # reads are now served from the watched state
        self.synced = True
        self.log.info(
            "caches_synced",
            nodes=len(self.nodes.views),
            policies=len(listed_policies),
            remediations=len(listed_remediations),
        )
        self.on_synced()
        for worker in self.workers.values():
            worker.touch_all()

    def _leadership(self, leading: bool) -> None:
        self.metrics.leadership(leading)
        self.log.info("leadership_acquired" if leading else "leadership_lost")
        for name, worker in self.workers.items():
            if leading:
                worker.touch_all()
                self._accept_soon(name)
            else:
                worker.abort()
        self.janitor.poke()

    # Watch events ----------------------------------------------------------------------------

    def node_event(self, kind: str | None, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata")
        name = metadata.get("name") if type(metadata) is dict else None
        if type(name) is not str:
            name = node_views.name_of(body)  # (odd content: read as every reader reads it)
        if not name:
            return
        if kind == "DELETED":
            before = self.nodes.body(name)
            relevant = self.nodes.remove(name)
        else:
            relevant = self.nodes.update(body, name)
            before = self.nodes.replaced
        if not relevant:
            if kind != "DELETED" and self.nodes.renewed and name in self._open and self.synced:
                # Fresh evidence for an open incident: a disruptive step may be waiting for a
                # condition seen after the previous one (the evidence gate).
                for worker in self.workers.values():
                    if worker.name in self._open[name].values():
                        worker.touch((name,))
            return
        self._first_seen.setdefault(name, _now())
        if not self.synced:
            return  # the first full plan after the initial sync covers it
        labels = node_views.labels_of(body)
        labelled = None if before is None else node_views.labels_of(before)
        for worker in self.workers.values():
            if kind == "DELETED" or _concerns(worker.policy, labelled, labels):
                worker.touch((name,))
        self.metrics.quarantined(self.nodes.quarantined())

    def policy_event(self, kind: str | None, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if not name:
            return
        self.records.observe_policy(kind, body)
        if kind == "DELETED":
            self.acceptances.pop(name, None)
            self._status_written.pop(name, None)
            self.metrics.policy_forgotten(name)
            self.log.info("policy_deleted", policy=name)
            self._watch_conditions()
            worker = self.workers.get(name)
            self._farewell(name, worker.policy if worker is not None else None)
            return
        acceptance = policies.accept(body)
        previous = self.acceptances.get(name)
        self.acceptances[name] = acceptance
        self.metrics.accepted(name, acceptance.accepted)
        if previous is None or previous != acceptance:
            log = self.log.info if acceptance.accepted else self.log.warning
            log(
                "policy_accepted" if acceptance.accepted else "policy_rejected",
                policy=name,
                generation=acceptance.generation,
                message=acceptance.message,
            )
        worker = self._worker(name)
        if worker.policy != acceptance.in_force or previous != acceptance:
            if worker.policy != acceptance.in_force:
                self._ownership_changed(name)
            worker.set_policy(acceptance.in_force)
            # Also when nothing runs (no valid version yet): Accepted=False must be written.
            self._accept_soon(name)
        self._watch_conditions()

    def _farewell(self, name: str, last: Policy | None) -> None:
        """The policy is gone: its worker runs on with the last version in force marked
        deleted, which closes its open Remediations `PolicyDeleted` and gives their nodes back
        (D13); it detects nothing new, so once they are closed it stays idle."""
        policy = dataclasses.replace(last or Policy(name=name, faults=()), deleted=True)
        self._worker(name).set_policy(policy)
        self._ownership_changed(name)

    def _worker(self, name: str) -> PolicyWorker:
        """The policy's worker, started on first use."""
        worker = self.workers.get(name)
        if worker is None:
            worker = PolicyWorker(
                name,
                self._reconciler(name),
                self._may_act,
                on_round=self._round_done(name),
                log=self.log,
            )
            self.workers[name] = worker
            self._spawn(f"policy/{name}", worker.run)
        return worker

    def _retire_if_done(self, name: str, result: Reconciled) -> None:
        """A deleted policy's worker stops once none of its Remediations is open."""
        worker = self.workers.get(name)
        if worker is None or worker.policy is None or not worker.policy.deleted:
            return
        if name in self.acceptances:
            return  # re-created meanwhile
        if any(n and str(phase) not in TERMINAL_PHASES for (phase, _), n in result.census.items()):
            return
        del self.workers[name]
        self.supervisor.cancel(f"policy/{name}")  # the worker's own task: ends at its next await
        self.log.info("policy_worker_retired", policy=name)

    def remediation_event(self, kind: str | None, body: Mapping[str, Any]) -> None:
        self.records.observe(kind, body)
        self.job_janitor.remediation(kind, body)
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name") or "")
        spec = body.get("spec") or {}
        policy, node = spec.get("policyName"), spec.get("nodeName")
        status = body.get("status") or {}
        draining = (
            kind != "DELETED"
            and status.get("step") == "Drain"
            and not status.get("stepFinishedAt")
            and status.get("phase") not in ("Succeeded", "Failed", "Cancelled")
        )
        if node and draining:
            self.drains.ensure(str(node))
        elif node and self._draining_by.get(str(node)) == name:
            self.drains.drop(str(node))
        if node and draining:
            self._draining_by[str(node)] = name
        elif node and self._draining_by.get(str(node)) == name:
            del self._draining_by[str(node)]
        if kind == "DELETED":
            self.janitor.forget(name)
            self._approvals.pop(name, None)
            changed = True
        else:
            self.janitor.observe(body)
            approve = (metadata.get("annotations") or {}).get(names.APPROVE, "")
            changed = self._approvals.get(name, "") != approve
            self._approvals[name] = approve
        if node and policy:
            is_open = kind != "DELETED" and status.get("phase") not in TERMINAL_PHASES
            self._note_remediation(name, str(node), str(policy), is_open)
        worker = self.workers.get(str(policy))
        if changed and worker is not None and node and self.synced:
            worker.touch((str(node),))

    # Ownership across policies ----------------------------------------------------------------

    def _note_remediation(self, name: str, node: str, policy: str, is_open: bool) -> None:
        """Track open Remediations by node; when a node's set changes (an incident opened or
        ended), every policy is woken for that node: its owner may have changed."""
        held = self._open.get(node)
        if is_open:
            if held is not None and held.get(name) == policy:
                return
            self._open.setdefault(node, {})[name] = policy
        else:
            if held is None or name not in held:
                return
            del held[name]
            if not held:
                del self._open[node]
        if self.synced:
            for worker in self.workers.values():
                worker.touch((node,))

    def _ownership_changed(self, name: str) -> None:
        """A policy appeared, changed or went away: the others replan every node (weights,
        selectors and ages decide who owns an overlap)."""
        if not self.synced:
            return  # the first full plan after the initial sync covers it
        for other, worker in self.workers.items():
            if other != name:
                worker.touch_all()

    def _policies(self) -> list[Policy]:
        return [w.policy for w in self.workers.values() if w.policy is not None]

    def _open_by_node(self) -> dict[str, frozenset[str]]:
        return {node: frozenset(held.values()) for node, held in self._open.items()}

    def foreign(self, policy: Policy, now: datetime | None = None) -> dict[str, str]:
        """The nodes `policy` selects that another policy owns, with their owner (at `now`:
        the policies showing a fault on a node come first, D61)."""
        return ownership.foreign(
            policy, self._policies(), self.nodes.views, self._open_by_node(), now
        )

    def _pods_changed(self, node: str) -> None:
        if self.synced:
            for worker in self.workers.values():
                worker.touch((node,))

    def job_event(self, kind: str | None, body: Mapping[str, Any]) -> None:
        """An executor Job finished: look at its node now rather than at the next check."""
        self.job_janitor.job(kind, body)
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name") or "")
        node = (metadata.get("annotations") or {}).get(names.NODE_ANNOTATION)
        finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in (body.get("status") or {}).get("conditions") or []
        )
        if kind == "DELETED" or not finished or not node or name in self._finished_jobs:
            if kind == "DELETED":
                self._finished_jobs.discard(name)
            return
        self._finished_jobs.add(name)
        if self.synced:
            for worker in self.workers.values():
                worker.touch((str(node),))

    def _watch_conditions(self) -> None:
        in_force = [a.in_force for a in self.acceptances.values() if a.in_force is not None]
        types = {m.type for p in in_force for f in p.faults for m in f.match}
        windows: dict[str, timedelta] = {}
        for match in (m for p in in_force for f in p.faults for m in f.match):
            if match.stale_after is not None:
                known = windows.get(match.type)
                windows[match.type] = min(known or match.stale_after, match.stale_after)
        self.nodes.watched = frozenset(types)
        self.nodes.stale_after = min(windows.values()) if windows else None
        self.nodes.windows = windows

    async def _staleness(self) -> None:
        """Going stale is no watch event: at the instant a node's watched condition has not
        been seen to change for its `staleAfter`, plan that node (its policies only)."""
        while True:
            self._stale_timer.clear()
            deadline = self.nodes.next_deadline()
            if deadline is None:
                await self._stale_timer.wait()
            else:
                delay = max((deadline - _now()).total_seconds(), 0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stale_timer.wait(), timeout=delay)
            for name in self.nodes.due(_now()):
                body = self.nodes.body(name)
                if body is None or not self.synced:
                    continue  # (the first full plan after the initial sync covers it)
                labels = node_views.labels_of(body)
                for worker in self.workers.values():
                    if _concerns(worker.policy, labels, labels):
                        worker.touch((name,))

    # Reconciling -----------------------------------------------------------------------------

    async def _write_acceptance(self, name: str) -> None:
        """Accepted condition and lastAcceptedSpec, written by the leader once per change."""
        acceptance = self.acceptances.get(name)
        if acceptance is None or not self.leading():
            return
        if self._status_written.get(name) == acceptance:
            return
        now = _now()
        try:
            await records.update_policy_status(
                self.client, name, lambda status: policies.status_change(acceptance, status, now)
            )
        except ApiError as error:
            self.log.warning("policy_status_failed", policy=name, error=str(error))
            return
        self._status_written[name] = acceptance

    def _reconciler(self, name: str) -> Any:
        async def reconcile(
            policy: Policy, focus: frozenset[str] | None, now: datetime
        ) -> Reconciled:
            # The live index, not a copy (copying 10,000 views per event costs more than the
            # plan): `reconcile` copies the policy's selection, so events arriving while this
            # plan runs belong to the next one.
            nodes = self.nodes.views
            self._snapshot_at[name] = _now()
            await self._write_acceptance(name)
            contested = ownership.contested(policy, self._policies(), nodes, self._open_by_node())
            if not contested:
                return await reconciler.reconcile(policy, nodes, self.ports, now, focus)
            async with self._overlap:
                return await reconciler.reconcile(
                    policy,
                    nodes,
                    self.ports,
                    now,
                    focus,
                    foreign=lambda: self.foreign(policy, now),
                    waiting=lambda: ownership.waiting(
                        policy, self._policies(), self.nodes.views, self._open_by_node(), now
                    ),
                    superseding=lambda: ownership.superseding(
                        policy, self._policies(), self.nodes.views, self._open_by_node(), now
                    ),
                    claimed=lambda: ownership.claimed(
                        policy, self._policies(), self.nodes.views, self._open_by_node(), now
                    ),
                )

        return reconcile

    async def _delete_job(self, job: JobKey) -> None:
        """An executor Job whose step ended `--job-retention` ago, with its pods."""
        try:
            await self.client.delete(
                path("batch/v1", "jobs", job.name, namespace=job.namespace),
                propagationPolicy="Background",
            )
        except ApiError as error:
            if error.status != 404:
                raise

    def _cordoned(self, node: str, policy: str) -> None:
        """Reaction time, taken when the cordon is written: from the node change that the
        round saw, else (the fault waited out its tolerate window, or arrived during an
        earlier round) from the start of the round that found the cordon due."""
        seen = self._first_seen.pop(node, None)
        started = self._snapshot_at.get(policy)
        if started is None:
            return
        since = seen if seen is not None and seen <= started else started
        self.metrics.reacted(policy, (_now() - since).total_seconds())

    def _round_done(self, name: str) -> Any:
        def done(round_: Round) -> None:
            result = round_.result
            now = _now()
            self.metrics.reconciled(
                name,
                (now - self._snapshot_at.get(name, round_.started)).total_seconds(),
                failed=round_.error is not None or bool(result and result.errors),
                waited=None if round_.waited is None else round_.waited.total_seconds(),
            )
            if result is None:
                return
            for state in result.written:  # before the watch echoes them: ownership is sticky
                self._note_remediation(state.name, state.node, state.policy, not state.terminal)
            snapshot = self._snapshot_at.get(name, round_.started)
            self.log.debug(
                "reconciled",
                policy=name,
                focus=None if round_.focus is None else sorted(round_.focus),
                applied=[f"{type(a.effect).__name__}:{a.node}:{a.result}" for a in result.applied],
                written=len(result.written),
                next_wake=None if result.next_wake is None else result.next_wake.isoformat(),
            )
            # Changes this plan saw and did not cordon for are not waiting for a reaction; a
            # cordon it defers (tolerate) is timed from the round that finds it due.
            planned = self._first_seen if round_.focus is None else round_.focus
            for node in [n for n in planned if n in self._first_seen]:
                if self._first_seen[node] <= snapshot:
                    del self._first_seen[node]
            self._retire_if_done(name, result)
            if name in self.acceptances:  # a deleted policy's gauges stay at zero
                self.metrics.policy_census(
                    name, {(str(phase), fault): n for (phase, fault), n in result.census.items()}
                )
            for error in result.errors:
                self.log.warning("reconcile_incomplete", policy=name, error=error)

        return done
