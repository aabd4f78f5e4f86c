"""Nodes as the API returns them (plain dicts) turned into what the planner reads.

Node objects come from many writers (kubelet, agents, admins, other controllers), so nothing
in them is trusted: a missing status, a condition that is not a dict, a timestamp that does not
parse, or a label value that is not a string is treated as absent, never as a crash.
`is_relevant_change` is the cheap filter the runtime applies to every Node watch event before
doing any work; it looks only at the fields a decision can depend on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.fleet import Condition, NodeView

QUARANTINE_TAINT = "remediation.gpuops.io/quarantine"
"""Our taint key (effect NoSchedule, value: the fault's name)."""
AGENT_ACK_ANNOTATION = "remediation.gpuops.io/agent-ack"
"""Where a NodeAgent executor answers; a change completes a GPUReset/Reboot step."""
QUARANTINED_BY_ANNOTATION = "remediation.gpuops.io/quarantined-by"
"""Written with our taint: the policy whose cordon it is (k8s/names.py QUARANTINED_BY)."""
UNCORDON_ON_RELEASE_ANNOTATION = "remediation.gpuops.io/uncordon-on-release"
"""Written by a cordon that flipped spec.unschedulable (k8s/names.py UNCORDON_ON_RELEASE)."""
READY = "Ready"
"""Always watched: reboot confirmation and budgets depend on it."""

_MAX_TEXT = 4096
"""Longer condition reasons/messages are cut: they only feed messages and regex matches."""


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as a UTC datetime, or None when absent or unreadable."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    return ""


def _labels(metadata: Mapping[str, Any]) -> dict[str, str]:
    raw = _mapping(metadata.get("labels"))
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def _conditions(status: Mapping[str, Any]) -> tuple[Condition, ...]:
    raw = status.get("conditions")
    if not isinstance(raw, list):
        return ()
    seen: set[str] = set()
    out: list[Condition] = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        type_ = item.get("type")
        if not isinstance(type_, str) or not type_ or type_ in seen:
            continue  # the API keys conditions by type; a duplicate is ignored, first wins
        seen.add(type_)
        out.append(
            Condition(
                type=type_,
                status=_text(item.get("status")),
                reason=_text(item.get("reason")),
                message=_text(item.get("message")),
                last_heartbeat_time=parse_time(item.get("lastHeartbeatTime")),
                last_transition_time=parse_time(item.get("lastTransitionTime")),
            )
        )
    return tuple(out)


def _quarantined(spec: Mapping[str, Any]) -> bool:
    taints = spec.get("taints")
    if not isinstance(taints, list):
        return False
    return any(
        isinstance(t, Mapping)
        and t.get("key") == QUARANTINE_TAINT
        and t.get("effect") == "NoSchedule"
        for t in taints
    )


def name_of(node: Mapping[str, Any]) -> str:
    """metadata.name, or "" when the object has none."""
    return _text(_mapping(node.get("metadata")).get("name"))


def to_view(node: Mapping[str, Any]) -> NodeView:
    """Reduce a Node object to the planner's NodeView; never raises on odd content."""
    metadata = _mapping(node.get("metadata"))
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    annotations = _mapping(metadata.get("annotations"))
    return NodeView(
        name=_text(metadata.get("name")),
        labels=_labels(metadata),
        conditions=_conditions(status),
        unschedulable=spec.get("unschedulable") is True,
        quarantined=_quarantined(spec),
        quarantined_by=_text(annotations.get(QUARANTINED_BY_ANNOTATION)),
        uncordon_on_release=annotations.get(UNCORDON_ON_RELEASE_ANNOTATION) == "true",
        boot_id=_text(_mapping(status.get("nodeInfo")).get("bootID")),
        created_at=parse_time(metadata.get("creationTimestamp")),
    )


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
    agent-ack annotation changed. A heartbeat-only change matters only when it could end
    staleness: a heartbeat appearing, or advancing by more than `stale_after` (the smallest
    `staleAfter` of the policies; None: heartbeats alone are never relevant). Becoming stale
    needs no event: the planner wakes itself at that deadline.
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
    old_spec, new_spec = _mapping(old.get("spec")), _mapping(new.get("spec"))
    if (old_spec.get("unschedulable") is True) != (new_spec.get("unschedulable") is True):
        return True
    if _taints(old) != _taints(new):
        return True
    old_info = _mapping(_mapping(old.get("status")).get("nodeInfo"))
    new_info = _mapping(_mapping(new.get("status")).get("nodeInfo"))
    if old_info.get("bootID") != new_info.get("bootID"):
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
