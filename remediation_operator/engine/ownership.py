"""Which policy owns a node that several policies select: at most one incident per node.

Two policies whose selectors overlap must not both remediate one node (issue 12, defect 3: a
GPUReset ran while the other policy's Reboot was under way, and one's release closed the
other's incident). Every node has at most one owner, decided the same way by every policy:

1. Sticky: the policy that has an open (non-terminal) Remediation on the node keeps it until
   that incident ends, whatever weights say meanwhile, including a deleted policy still
   closing its incidents. (If an older version left several open, the rule below picks among
   them.)
2. Otherwise, among the policies (not deleted) selecting the node, those that show one of
   their faults on it now (given `now`; issue 21, D61): policies split by fault domain (one
   for GPU XIDs, one for a network condition) compose, so the network policy may open its
   incident on a node the GPU policy outranks but has no fault on. One active incident per
   node, not one policy per node.
3. Among those, a policy whose fault acts (its ladder has a disruptive step, and the policy
   enforces and is not paused) comes before one whose fault only holds the node cordoned
   (issue 21, D76): the hold would yield to it at once (rule 1's exception below).
4. Then (and among all selecting policies when none shows a fault, or without `now`) the
   highest `spec.weight`, as Karpenter does for overlapping NodePools; ties go to the older
   policy (creationTimestamp), then to the name in alphabetical order (deterministic).

The exception to rule 1 (D76): an open incident whose fault only holds the node (a cordon-only
ladder, such as a catch-all's `Hold`) yields its node to another policy that shows an acting
fault there with strong evidence (`superseding`): it ends `SupersededByPolicy` without giving
anything back, its quarantine marks pointed at the other policy first (one write), whose
incident's cordon then finds the node cordoned and records it as its own. A node another
policy holds or shows a fault on is `claimed`: no policy releases a cordon of its own there
that no incident of its records (the marks may be its own before the yield is recorded).

Each policy's snapshot lists, in `Snapshot.foreign`, the nodes it selects but does not own,
with their owner: it opens no incident there and shows the overlap in its status. This is a
pure function of the policies, the node index and the open Remediations, so the runtime, the
in-memory cluster and the simulator decide ownership identically.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime

from remediation_operator.domain import matching
from remediation_operator.domain.fleet import NodeView
from remediation_operator.domain.policy import DISRUPTIVE, Fault, Mode, Policy
from remediation_operator.engine.node_index import NodeIndex

_YOUNGEST = datetime.max.replace(tzinfo=UTC)
"""A policy whose creationTimestamp is unknown ranks as the youngest."""


def rank(policy: Policy) -> tuple[int, datetime, str]:
    """Sort key: the owner of a contested node is the policy with the smallest rank."""
    return (-policy.weight, policy.created_at or _YOUNGEST, policy.name)


def acts(policy: Policy, fault: Fault) -> bool:
    """Whether `fault` of `policy` does more than hold the node cordoned: its ladder has a
    disruptive step, and the policy enforces, is not paused and is not deleted (D76)."""
    return (
        policy.mode is Mode.Enforce
        and not policy.is_paused
        and not policy.deleted
        and any(step.action in DISRUPTIVE for step in fault.ladder)
    )


def selection(policy: Policy, nodes: Mapping[str, NodeView]) -> Mapping[str, NodeView]:
    """The nodes `policy` selects (the index's live selection when given a NodeIndex)."""
    selector = policy.node_selector
    if isinstance(nodes, NodeIndex):
        return nodes.selected(selector)
    if not selector.match_labels and not selector.match_expressions:
        return nodes
    return {name: view for name, view in nodes.items() if selector.matches(view.labels)}


def contested(
    policy: Policy,
    policies: Iterable[Policy],
    nodes: Mapping[str, NodeView],
    open_by_node: Mapping[str, Collection[str]],
) -> dict[str, list[Policy]]:
    """Nodes `policy` selects that another policy also claims (selects and is not deleted, or
    has an open Remediation there), with those other policies."""
    mine = selection(policy, nodes)
    out: dict[str, list[Policy]] = {}
    others = [p for p in policies if p.name != policy.name]
    if not others:
        return out
    for other in others:
        if other.deleted:
            continue
        theirs = selection(other, nodes)
        small, large = (mine, theirs) if len(mine) <= len(theirs) else (theirs, mine)
        for name in small:
            if name in large:
                out.setdefault(name, []).append(other)
    by_name = {p.name: p for p in others}
    for name, owners in open_by_node.items():
        if name not in mine:
            continue
        for owner in owners:
            holder = by_name.get(owner)
            if holder is not None and all(p.name != owner for p in out.get(name, ())):
                out.setdefault(name, []).append(holder)
    return out


def foreign(
    policy: Policy,
    policies: Iterable[Policy],
    nodes: Mapping[str, NodeView],
    open_by_node: Mapping[str, Collection[str]],
    now: datetime | None = None,
) -> dict[str, str]:
    """For `policy`: the nodes it selects that another policy owns, by node: the owner's name.

    `policies`: every policy known (deleted ones still closing incidents included);
    `open_by_node`: by node, the policies with an open Remediation there; `now`: judge which
    policies show a fault on a contested node now (None: by rank alone).
    """
    out: dict[str, str] = {}
    for name, others in contested(policy, policies, nodes, open_by_node).items():
        holders = open_by_node.get(name, ())
        candidates = [policy, *others]
        sticky = [p for p in candidates if p.name in holders]
        if sticky:
            owner = min(sticky, key=rank)
        else:
            live = [p for p in candidates if not p.deleted]
            view = nodes.get(name)
            if now is not None and view is not None:
                found = {p.name: _match(p, view, now) for p in live}
                faulty = [p for p in live if found[p.name] is not None]
                acting = [p for p in faulty if _acting(p, found[p.name])]
                live = acting or faulty or live
            owner = min(live, key=rank, default=policy)
        if owner.name != policy.name:
            out[name] = owner.name
    return out


def _match(policy: Policy, view: NodeView, now: datetime) -> matching.Match | None:
    """The policy's most severe fault on the node now (weak evidence included)."""
    return matching.Matcher(policy.faults).match(view, now)


def _acting(policy: Policy, found: matching.Match | None) -> bool:
    return found is not None and acts(policy, found.fault)


def _fault_of(policy: Policy, view: NodeView, now: datetime) -> str | None:
    found = _match(policy, view, now)
    return None if found is None else found.fault.name


def waiting(
    policy: Policy,
    policies: Iterable[Policy],
    nodes: Mapping[str, NodeView],
    open_by_node: Mapping[str, Collection[str]],
    now: datetime,
) -> dict[str, tuple[str, ...]]:
    """For the nodes `policy` holds an open incident on: the other policies (not deleted,
    selecting the node) whose fault the node shows now, as `<policy>/<fault>`, in rank order.
    They wait for that incident to end (one active incident per node)."""
    out: dict[str, tuple[str, ...]] = {}
    for name, others in contested(policy, policies, nodes, open_by_node).items():
        if policy.name not in open_by_node.get(name, ()):
            continue
        view = nodes.get(name)
        if view is None:
            continue
        faults = []
        for other in sorted(others, key=rank):
            if other.deleted or name not in selection(other, nodes):
                continue
            fault = _fault_of(other, view, now)
            if fault is not None:
                faults.append(f"{other.name}/{fault}")
        if faults:
            out[name] = tuple(faults)
    return out


def superseding(
    policy: Policy,
    policies: Iterable[Policy],
    nodes: Mapping[str, NodeView],
    open_by_node: Mapping[str, Collection[str]],
    now: datetime,
) -> dict[str, str]:
    """For the nodes `policy` holds an open incident on: the first other policy (by rank)
    that selects the node and shows an acting fault there with strong evidence, as
    `<policy>/<fault>`. An incident of `policy` whose own fault only holds the node yields
    to it (the planner decides, knowing its incident's fault; D76). Only a policy that would
    open there now counts: not on an excluded node, nor inside its `startupGrace`. (Its own
    holds, such as a Failed incident on that fault, and its circuit breaker are its planner's
    to judge: then the node stays cordoned, unowned, while that fault shows.)"""
    out: dict[str, str] = {}
    for name, others in contested(policy, policies, nodes, open_by_node).items():
        holders = open_by_node.get(name, ())
        if policy.name not in holders:
            continue
        view = nodes.get(name)
        if view is None or view.excluded:
            continue  # an excluded node opens nothing new: the incident holds it as it is
        for other in sorted(others, key=rank):
            if other.name in holders or name not in selection(other, nodes):
                continue  # it has an incident of its own there (an older revision's leftover)
            born = view.created_at
            if born is not None and born > now - other.startup_grace:
                continue  # the other policy would not open there yet (its startup grace)
            found = _match(other, view, now)
            if found is not None and not found.weak and acts(other, found.fault):
                out[name] = f"{other.name}/{found.fault.name}"
                break
    return out


def claimed(
    policy: Policy,
    policies: Iterable[Policy],
    nodes: Mapping[str, NodeView],
    open_by_node: Mapping[str, Collection[str]],
    now: datetime,
) -> frozenset[str]:
    """The nodes `policy` selects that another policy owns and has a claim on now: an open
    incident there, or one of its faults on the node. A cordon marked as `policy`'s with no
    incident of `policy` recording it is not released there (D76): the marks were pointed at
    `policy` by a yield whose record the process died before writing (the other incident is
    still open), or `policy`'s fault cleared before its incident took the node while the
    other's still shows (that policy's next incident takes the cordon over). A node another
    policy owns by rank alone, with nothing to do there, is no claim: an unrecorded cordon of
    `policy` on it is released as before."""
    owners = foreign(policy, policies, nodes, open_by_node, now)
    by_name = {p.name: p for p in policies}
    out: set[str] = set()
    for name, owner in owners.items():
        if owner in open_by_node.get(name, ()):
            out.add(name)
            continue
        holder, view = by_name.get(owner), nodes.get(name)
        if holder is not None and view is not None and _match(holder, view, now) is not None:
            out.add(name)
    return frozenset(out)
