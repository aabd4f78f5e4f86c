"""The Node relevance filter as it was before it compared raw values (the oracle).

`engine.nodes.is_relevant_change` was rewritten for speed (no timestamp parsing unless a
policy sets staleAfter and a heartbeat moved; no abstract-class checks on plain dicts). This
copy of the previous version, kept verbatim, is what the property test holds the new one to:
the rewrite must not change a single answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from remediation_operator.domain.fleet import EXCLUDE_KEY
from remediation_operator.engine.nodes import AGENT_ACK_ANNOTATION, READY, gpu_counts, parse_time


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _condition_facts(
    node: Mapping[str, Any], watched: Collection[str]
) -> dict[str, tuple[object, object, datetime | None]]:
    status = _mapping(node.get("status"))
    raw = status.get("conditions")
    facts: dict[str, tuple[object, object, datetime | None]] = {}
    if not isinstance(raw, list):
        return facts
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        type_ = item.get("type")
        if isinstance(type_, str) and (type_ == READY or type_ in watched) and type_ not in facts:
            heartbeat = parse_time(item.get("lastHeartbeatTime"))
            facts[type_] = (item.get("status"), item.get("reason"), heartbeat)
    return facts


def _taints(node: Mapping[str, Any]) -> object:
    return _mapping(node.get("spec")).get("taints")


def is_relevant_change(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    watched_condition_types: Collection[str],
    stale_after: timedelta | None = None,
) -> bool:
    """Could this Node update change a decision? Cheap; called on every watch event.

    Relevant: the node appeared or went away; a watched condition (or Ready) appeared,
    disappeared, or changed status or reason; spec.unschedulable, taints, labels, bootID or our
    agent-ack annotation (or, since, the exclude annotation) changed. A heartbeat-only change
    matters only when it could end staleness: a heartbeat appearing, or advancing by more
    than `stale_after` (the smallest `staleAfter` of the policies; None: heartbeats alone are
    never relevant). Becoming stale needs no event: the planner wakes itself at that deadline.
    """
    if old is None or new is None:
        return old is not new
    old_meta, new_meta = _mapping(old.get("metadata")), _mapping(new.get("metadata"))
    if old_meta.get("labels") != new_meta.get("labels"):
        return True
    if _mapping(old_meta.get("annotations")).get(AGENT_ACK_ANNOTATION) != _mapping(
        new_meta.get("annotations")
    ).get(AGENT_ACK_ANNOTATION):
        return True
    # Added since (issue 12, defect 14): the opt-out annotation is a decision input too.
    if _mapping(old_meta.get("annotations")).get(EXCLUDE_KEY) != _mapping(
        new_meta.get("annotations")
    ).get(EXCLUDE_KEY):
        return True
    old_spec, new_spec = _mapping(old.get("spec")), _mapping(new.get("spec"))
    if (old_spec.get("unschedulable") is True) != (new_spec.get("unschedulable") is True):
        return True
    if _taints(old) != _taints(new):
        return True
    old_info = _mapping(_mapping(old.get("status")).get("nodeInfo"))
    new_info = _mapping(_mapping(new.get("status")).get("nodeInfo"))
    if old_info.get("bootID") != new_info.get("bootID"):
        return True
    # Added since (issue 21, D68): the GPUs advertised are a recovery input.
    if gpu_counts(_mapping(old.get("status"))) != gpu_counts(_mapping(new.get("status"))):
        return True
    old_facts = _condition_facts(old, watched_condition_types)
    new_facts = _condition_facts(new, watched_condition_types)
    if old_facts.keys() != new_facts.keys():
        return True
    for type_, (status, reason, heartbeat) in new_facts.items():
        old_status, old_reason, old_heartbeat = old_facts[type_]
        if status != old_status or reason != old_reason:
            return True
        if stale_after is None or heartbeat is None:
            continue
        if old_heartbeat is None or heartbeat - old_heartbeat > stale_after:
            return True
    return False
