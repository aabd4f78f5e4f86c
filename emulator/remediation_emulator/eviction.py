"""The Eviction API and the disruption controller's PodDisruptionBudget status.

Eviction follows kubernetes pkg/registry/core/pod/storage/eviction.go (v1.32): pods that are
Pending, finished or already terminating are deleted without looking at budgets; more than one
matching PDB is a 500; a not-Ready pod is deleted without spending budget when the PDB is
otherwise satisfied (or its policy is AlwaysAllow); otherwise `disruptionsAllowed == 0` is a
429 "Cannot evict pod as it would violate the pod's disruption budget." with a
`DisruptionBudget` cause, and success spends one disruption, records the pod in
`status.disruptedPods`, adds the `DisruptionTarget` condition and deletes the pod gracefully.

PDB status follows the disruption controller: healthy pods are Ready, not terminating and not
in `disruptedPods`; `desiredHealthy` from minAvailable (int, or percent of expected rounded up)
or expected minus maxUnavailable (percent rounded up); `disruptionsAllowed = healthy - desired`
floored at 0. One difference: the real controller takes `expectedPods` from the owning
controllers' scale for percentages and maxUnavailable; here it is the number of matching pods.
Membership is maintained incrementally per PDB, so a pod change costs O(PDBs in its namespace).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remediation_emulator import errors, selectors
from remediation_emulator.resources import ResourceType
from remediation_emulator.store import Store, timestamp
from remediation_emulator.watch import DELETED, Event

Obj = dict[str, Any]
PODS = ("", "pods")
PDBS = ("policy", "poddisruptionbudgets")
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def scaled(value: Any, total: int, *, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = int(value[:-1])
        except ValueError:
            raise errors.bad_request(
                f"invalid value for IntOrString: invalid value {value!r}"
            ) from None
        exact = percent * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


@dataclass
class _Budget:
    selector: selectors.LabelSelector
    matched: set[str] = field(default_factory=set)
    healthy: set[str] = field(default_factory=set)


class Disruption:
    """Keeps every PDB's status current as pods change (the disruption controller)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._budgets: dict[tuple[str, str], _Budget] = {}
        store.observers.append(self.on_event)

    def on_event(self, rtype: ResourceType, event: Event) -> None:
        if rtype.key == PODS:
            self._pod_changed(event)
        elif rtype.key == PDBS:
            self._pdb_changed(event)

    def _pdb_changed(self, event: Event) -> None:
        meta = event.obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if event.type == DELETED:
            self._budgets.pop(key, None)
            return
        spec = event.obj.get("spec") or {}
        selector = selectors.from_spec(spec.get("selector"))
        budget = self._budgets.get(key)
        status = event.obj.get("status") or {}
        if budget is None or budget.selector != selector:
            budget = _Budget(selector)
            self._budgets[key] = budget
            pods = self.store.collection(self.store.resolve("pods"))
            for pod_key in pods.range(key[0], None):
                self._place(budget, pods.objects[pod_key], event.obj)
        elif status.get("observedGeneration") == meta.get("generation"):
            # A status write (the eviction spending a disruption): pods marked as disrupted
            # stop counting as healthy before the status is recomputed, so the recomputed
            # status agrees with the decrement instead of undoing it.
            budget.healthy -= set(status.get("disruptedPods") or {})
        self._write_status(key, event.obj, budget)

    def _place(self, budget: _Budget, pod: Obj | None, pdb: Obj) -> None:
        if pod is None:
            return
        name = pod["metadata"]["name"]
        budget.matched.discard(name)
        budget.healthy.discard(name)
        if budget.selector.matches(pod["metadata"].get("labels")):
            budget.matched.add(name)
            disrupted = (pdb.get("status") or {}).get("disruptedPods") or {}
            if (
                is_ready(pod)
                and not pod["metadata"].get("deletionTimestamp")
                and name not in disrupted
            ):
                budget.healthy.add(name)

    def _pod_changed(self, event: Event) -> None:
        namespace = event.obj["metadata"].get("namespace", "")
        name = event.obj["metadata"]["name"]
        labels = event.obj["metadata"].get("labels")
        for key, budget in list(self._budgets.items()):
            if key[0] != namespace:
                continue
            before = (name in budget.matched, name in budget.healthy)
            if not before[0] and (event.type == DELETED or not budget.selector.matches(labels)):
                continue  # a pod this budget neither counted nor counts now: nothing to read
            try:
                pdb = self.store.get("poddisruptionbudgets", key[1], key[0])
            except errors.ApiError:
                continue
            if event.type == DELETED:
                budget.matched.discard(name)
                budget.healthy.discard(name)
            else:
                self._place(budget, event.obj, pdb)
            if (name in budget.matched, name in budget.healthy) != before or (
                event.type == DELETED
                and name in ((pdb.get("status") or {}).get("disruptedPods") or {})
            ):
                self._write_status(key, pdb, budget, forget=name if event.type == DELETED else None)

    def status_for(self, pdb: Obj, budget: _Budget, forget: str | None = None) -> Obj:
        spec = pdb.get("spec") or {}
        old = pdb.get("status") or {}
        expected = len(budget.matched)
        healthy = len(budget.healthy)
        if spec.get("minAvailable") is not None:
            desired = scaled(spec["minAvailable"], expected, round_up=True)
        elif spec.get("maxUnavailable") is not None:
            desired = max(0, expected - scaled(spec["maxUnavailable"], expected, round_up=True))
        else:
            desired = 0
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        disrupted = {
            k: v
            for k, v in (old.get("disruptedPods") or {}).items()
            if k in budget.matched and k != forget
        }
        generation = pdb["metadata"].get("generation", 1)
        allowed_true = allowed > 0
        previous = next(
            (c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
        )
        condition_status = "True" if allowed_true else "False"
        transition = (
            previous["lastTransitionTime"]
            if previous is not None and previous.get("status") == condition_status
            else timestamp(self.store.clock())
        )
        status: Obj = {
            "observedGeneration": generation,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": condition_status,
                    "reason": "SufficientPods" if allowed_true else "InsufficientPods",
                    "message": "",
                    "observedGeneration": generation,
                    "lastTransitionTime": transition,
                }
            ],
        }
        if disrupted:
            status["disruptedPods"] = disrupted
        return status

    def _write_status(
        self, key: tuple[str, str], pdb: Obj, budget: _Budget, forget: str | None = None
    ) -> None:
        status = self.status_for(pdb, budget, forget)
        if status != pdb.get("status"):
            self.store.replace(
                "poddisruptionbudgets",
                key[1],
                {**pdb, "status": status},
                key[0],
                subresource="status",
            )

    def matching(self, pod: Obj) -> list[Obj]:
        namespace = pod["metadata"]["namespace"]
        found = []
        for (ns, name), budget in self._budgets.items():
            if ns == namespace and budget.selector.matches(pod["metadata"].get("labels")):
                found.append(self.store.get("poddisruptionbudgets", name, ns))
        return found

    def evict(
        self, namespace: str, name: str, body: Mapping[str, Any], *, dry_run: bool = False
    ) -> tuple[int, Obj]:
        """POST pods/NAME/eviction: (HTTP code, Status body); raises ApiError on refusal."""
        if not isinstance(body, Mapping):
            raise errors.bad_request("not a Eviction object")
        if (body.get("metadata") or {}).get("name") != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        grace = options.get("gracePeriodSeconds")
        pod = self.store.get("pods", name, namespace)
        phase = (pod.get("status") or {}).get("phase")
        success: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
            if not dry_run:
                self._delete(pod, grace, options.get("preconditions"))
            return 201, success
        pdbs = self.matching(pod)
        if len(pdbs) > 1:
            return 500, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
                "code": 500,
            }
        if pdbs:
            pdb = pdbs[0]
            status = pdb.get("status") or {}
            spend = True
            if not is_ready(pod):
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
                desired = int(status.get("desiredHealthy") or 0)
                if policy == "AlwaysAllow" or (
                    int(status.get("currentHealthy") or 0) >= desired and desired > 0
                ):
                    spend = False
            if spend:
                allowed = int(status.get("disruptionsAllowed") or 0)
                if allowed == 0:
                    raise errors.ApiError(
                        429,
                        "TooManyRequests",
                        VIOLATION,
                        causes=(
                            errors.Cause(
                                "DisruptionBudget",
                                f"The disruption budget {pdb['metadata']['name']} needs "
                                f"{int(status.get('desiredHealthy') or 0)} healthy pods and has "
                                f"{int(status.get('currentHealthy') or 0)} currently",
                            ),
                        ),
                        retry_after_seconds=0,
                    )
                if not dry_run:
                    disrupted = {
                        **(status.get("disruptedPods") or {}),
                        name: timestamp(self.store.clock()),
                    }
                    new_status = {
                        **status,
                        "disruptionsAllowed": allowed - 1,
                        "disruptedPods": disrupted,
                    }
                    self.store.replace(
                        "poddisruptionbudgets",
                        pdb["metadata"]["name"],
                        {**pdb, "status": new_status},
                        namespace,
                        subresource="status",
                    )
        if not dry_run:
            self._delete(pod, grace, options.get("preconditions"), condition=True)
        return 201, success

    def _delete(
        self, pod: Obj, grace: int | None, preconditions: Any, *, condition: bool = False
    ) -> None:
        meta = pod["metadata"]
        if condition:
            conditions = [
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") != "DisruptionTarget"
            ]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastTransitionTime": timestamp(self.store.clock()),
                }
            )
            pod = self.store.patch(
                "pods",
                meta["name"],
                {"status": {"conditions": conditions}},
                meta["namespace"],
                subresource="status",
            )
        self.store.delete(
            "pods",
            meta["name"],
            meta["namespace"],
            grace_period_seconds=grace,
            preconditions=preconditions if isinstance(preconditions, Mapping) else None,
        )
