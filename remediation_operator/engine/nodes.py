"""Nodes as the API returns them (plain dicts) turned into what the planner reads.

Node objects come from many writers (kubelet, agents, admins, other controllers), so nothing
in them is trusted: a missing status, a condition that is not a dict, a timestamp that does not
parse, or a label value that is not a string is treated as absent, never as a crash.
`is_relevant_change` is the cheap filter the runtime applies to every Node watch event before
doing any work; it looks only at the fields a decision can depend on.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from remediation_operator.domain.fleet import EXCLUDE_KEY, Condition, NodeView

QUARANTINE_TAINT = "remediation.gpuops.io/quarantine"
"""Our taint key (effect NoSchedule, value: the fault's name)."""
AGENT_ACK_ANNOTATION = "remediation.gpuops.io/agent-ack"
"""Where a NodeAgent executor answers; a change completes a GPUReset/Reboot step."""
QUARANTINED_BY_ANNOTATION = "remediation.gpuops.io/quarantined-by"
"""Written with our taint: the policy whose cordon it is (k8s/names.py QUARANTINED_BY)."""
UNCORDON_ON_RELEASE_ANNOTATION = "remediation.gpuops.io/uncordon-on-release"
"""Written by a cordon that flipped spec.unschedulable (k8s/names.py UNCORDON_ON_RELEASE)."""
GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the NVIDIA device plugin advertises (capacity and allocatable)."""
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
    if type(value) is dict:  # what JSON gives: skip the slower abstract-class check
        return value
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    return ""


def _labels(metadata: Mapping[str, Any]) -> dict[str, str]:
    raw = _mapping(metadata.get("labels"))
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def _conditions(
    status: Mapping[str, Any], observed: Mapping[str, datetime]
) -> tuple[Condition, ...]:
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
                observed_at=observed.get(type_),
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


_MAX_COUNT_DIGITS = 6


def _count(resources: object) -> int | None:
    """`nvidia.com/gpu` of a status.capacity or status.allocatable mapping as a whole number,
    or None when absent or not one. The API server writes a quantity as a string ("8"); a
    plain integer is accepted too, anything else (a suffix, a fraction) is no count."""
    if type(resources) is not dict and not isinstance(resources, Mapping):
        return None
    value = resources.get(GPU_RESOURCE)
    if type(value) is int:
        return value if value >= 0 else None
    if isinstance(value, str) and 0 < len(value) <= _MAX_COUNT_DIGITS and value.isdigit():
        return int(value) if value.isascii() else None
    return None


def gpu_counts(status: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(capacity, allocatable) of `nvidia.com/gpu` in a Node's status."""
    return _count(status.get("capacity")), _count(status.get("allocatable"))


def name_of(node: Mapping[str, Any]) -> str:
    """metadata.name, or "" when the object has none."""
    return _text(_mapping(node.get("metadata")).get("name"))


def labels_of(node: Mapping[str, Any]) -> dict[str, str]:
    """metadata.labels (string keys and values only), {} when the object has none."""
    return _labels(_mapping(node.get("metadata")))


_NOT_OBSERVED: Mapping[str, datetime] = {}


def to_view(node: Mapping[str, Any], observed: Mapping[str, datetime] | None = None) -> NodeView:
    """Reduce a Node object to the planner's NodeView; never raises on odd content.

    `observed`: by condition type, when the operator last saw the condition change, on its own
    clock (`engine.condition_clock`); it becomes `Condition.observed_at`, from which staleness
    is judged. A condition without one is never stale: every caller that runs policies
    (the runtime's node cache, the in-memory cluster) passes it."""
    metadata = _mapping(node.get("metadata"))
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    annotations = _mapping(metadata.get("annotations"))
    return NodeView(
        name=_text(metadata.get("name")),
        labels=_labels(metadata),
        conditions=_conditions(status, _NOT_OBSERVED if observed is None else observed),
        unschedulable=spec.get("unschedulable") is True,
        quarantined=_quarantined(spec),
        quarantined_by=_text(annotations.get(QUARANTINED_BY_ANNOTATION)),
        uncordon_on_release=annotations.get(UNCORDON_ON_RELEASE_ANNOTATION) == "true",
        excluded_by_annotation=annotations.get(EXCLUDE_KEY) == "true",
        boot_id=_text(_mapping(status.get("nodeInfo")).get("bootID")),
        created_at=parse_time(metadata.get("creationTimestamp")),
        gpu_capacity=_count(status.get("capacity")),
        gpu_allocatable=_count(status.get("allocatable")),
    )


class Change(enum.Enum):
    """What a Node update means to the operator (`classify`)."""

    RELEVANT = "relevant"
    """It could alter a decision: plan for the node."""
    VIEW = "view"
    """No decision changes, but the node's view does (a heartbeat, a message): rebuild it before
    the next plan reads it."""
    UNSEEN = "unseen"
    """Only conditions no policy watches (nor Ready) changed, or parts of the status `to_view`
    does not read (capacity and allocatable but `nvidia.com/gpu`, images, addresses...), or
    nothing but the object's version: no plan reads what changed, so the view may stay as it
    is until the set of watched conditions changes. (Metadata, spec and nodeInfo are compared
    whole: `to_view` may read any of them. If it ever reads another part of the status,
    compare that part here too.)"""


_UNTRACKED_METADATA = frozenset({"resourceVersion", "managedFields"})
"""Metadata that every write changes and that nothing reads."""
_ZERO = timedelta(0)


def _watched_conditions(
    node: Mapping[str, Any], watched: Collection[str]
) -> dict[str, Mapping[str, Any]]:
    """The raw Ready and watched conditions by type (the first of a type, as `to_view` reads)."""
    raw = _mapping(node.get("status")).get("conditions")
    found: dict[str, Mapping[str, Any]] = {}
    if not isinstance(raw, list):
        return found
    for item in raw:
        if type(item) is not dict and not isinstance(item, Mapping):
            continue
        type_ = item.get("type")
        if isinstance(type_, str) and (type_ == READY or type_ in watched) and type_ not in found:
            found[type_] = item
    return found


def _equal_except(old: Mapping[str, Any], new: Mapping[str, Any], skip: Collection[str]) -> bool:
    """The two mappings hold the same keys, and the same values outside `skip`.

    A plain loop: it runs on every Node event, where a generator's setup cost more than the
    comparisons (docs/performance.md)."""
    if len(old) != len(new):
        return False
    for key, value in new.items():
        if key not in old:
            return False
        if key in skip:
            continue
        was = old[key]
        if was is not value and was != value:
            return False
    return True


def first_of_type(conditions: Sequence[object], place: int, type_: str) -> bool:
    """No condition before `place` has type `type_`: the API keys conditions by type, and
    every reader (`to_view`, `classify`, `engine.condition_clock`) takes the first of a type."""
    for earlier in conditions[:place]:
        if type(earlier) is dict and earlier.get("type") == type_:
            return False
    return True


def _beat_ends_staleness(
    old: Mapping[str, Any], new: Mapping[str, Any], stale_after: timedelta
) -> bool:
    """The heartbeat appeared, or advanced by more than `stale_after`. The raw strings are
    compared first: timestamps are parsed only when the heartbeat actually moved."""
    text, old_text = new.get("lastHeartbeatTime"), old.get("lastHeartbeatTime")
    if text == old_text and stale_after >= _ZERO:
        return False  # the same instant (or both unreadable): it advanced by nothing
    heartbeat = parse_time(text)
    if heartbeat is None:
        return False
    old_heartbeat = parse_time(old_text)
    return old_heartbeat is None or heartbeat - old_heartbeat > stale_after


def classify(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    watched_condition_types: Collection[str],
    stale_after: timedelta | None = None,
) -> Change:
    """What this Node update means: see `is_relevant_change` for RELEVANT, `Change` for the rest.

    (A heartbeat, whose moved conditions `handlers.node_trim.heartbeat` found, is judged from
    those alone by `classify_moved`, with the same answer: the node cache's path for most
    events.)

    `stale_after` compares the new heartbeat with the old one only (two remote instants, never
    with our clock). The runtime's node cache passes None: it judges the end of a staleness
    on its own clock from when it last saw the condition change (`engine.condition_clock`).

    Called on every watch event, so it compares raw values and parses no timestamp unless a
    policy sets `staleAfter` and a watched heartbeat moved.
    """
    if old is None or new is None:
        return Change.RELEVANT if old is not new else Change.UNSEEN
    old_meta, new_meta = _mapping(old.get("metadata")), _mapping(new.get("metadata"))
    if old_meta.get("labels") != new_meta.get("labels"):
        return Change.RELEVANT
    old_notes = _mapping(old_meta.get("annotations"))
    new_notes = _mapping(new_meta.get("annotations"))
    if old_notes.get(AGENT_ACK_ANNOTATION) != new_notes.get(AGENT_ACK_ANNOTATION):
        return Change.RELEVANT
    if old_notes.get(EXCLUDE_KEY) != new_notes.get(EXCLUDE_KEY):
        return Change.RELEVANT
    old_spec, new_spec = _mapping(old.get("spec")), _mapping(new.get("spec"))
    if (old_spec.get("unschedulable") is True) != (new_spec.get("unschedulable") is True):
        return Change.RELEVANT
    if old_spec.get("taints") != new_spec.get("taints"):
        return Change.RELEVANT
    old_status, new_status = _mapping(old.get("status")), _mapping(new.get("status"))
    old_info, new_info = _mapping(old_status.get("nodeInfo")), _mapping(new_status.get("nodeInfo"))
    if old_info.get("bootID") != new_info.get("bootID"):
        return Change.RELEVANT
    if gpu_counts(old_status) != gpu_counts(new_status):
        return Change.RELEVANT  # GPUs advertised again, or lost: recovery reads them (D68)
    old_conditions = _watched_conditions(old, watched_condition_types)
    new_conditions = _watched_conditions(new, watched_condition_types)
    if old_conditions.keys() != new_conditions.keys():
        return Change.RELEVANT
    seen = True
    for type_, condition in new_conditions.items():
        before = old_conditions[type_]
        if condition.get("status") != before.get("status"):
            return Change.RELEVANT
        if condition.get("reason") != before.get("reason"):
            return Change.RELEVANT
        if stale_after is not None and _beat_ends_staleness(before, condition, stale_after):
            return Change.RELEVANT
        if seen and condition != before:
            seen = False  # a heartbeat, message or transition time: the view changes
    if (
        seen
        and list(old_conditions) == list(new_conditions)  # the planner reads them in order
        and old_spec == new_spec
        and old_info == new_info
        and _equal_except(old_meta, new_meta, _UNTRACKED_METADATA)
    ):
        return Change.UNSEEN
    return Change.VIEW


def classify_moved(
    old: Mapping[str, Any], new: Mapping[str, Any], moved: Sequence[int], watched: Collection[str]
) -> Change | None:
    """`classify`'s answer from the moved places alone; None: left to the full comparison.

    The caller vouches that `new` differs from `old` only in these places of
    `status.conditions` (`handlers.node_trim.heartbeat`); only their conditions are read, so
    `new` may be the Node as the watch delivered it, untrimmed.

    A moved condition of a type no policy watches (nor Ready) changes nothing; a moved watched
    one whose status and reason stayed, and which is the first of its type (the one `to_view`
    reads), changes the view only."""
    before = _mapping(old.get("status")).get("conditions")
    after = _mapping(new.get("status")).get("conditions")
    if type(before) is not list or type(after) is not list or len(before) != len(after):
        return None
    answer = Change.UNSEEN
    for place in moved:  # (plain loops here: see `_equal_except`)
        was, now = before[place], after[place]
        if type(was) is not dict or type(now) is not dict:
            return None
        type_ = now.get("type")
        if type(type_) is not str or type_ != was.get("type"):
            return None
        if type_ != READY and type_ not in watched:
            continue
        if now.get("status") != was.get("status") or now.get("reason") != was.get("reason"):
            return None
        if not first_of_type(after, place, type_):
            return None  # `to_view` reads another one
        answer = Change.VIEW
    return answer


def is_relevant_change(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    watched_condition_types: Collection[str],
    stale_after: timedelta | None = None,
) -> bool:
    """Could this Node update change a decision? Cheap; called on every watch event.

    Relevant: the node appeared or went away; a watched condition (or Ready) appeared,
    disappeared, or changed status or reason; the `nvidia.com/gpu` capacity or allocatable
    count changed; spec.unschedulable, taints, labels, bootID, our
    agent-ack annotation or the exclude annotation (an opt-out) changed. A heartbeat-only
    change matters only when it could end staleness: a heartbeat appearing, or advancing by
    more than `stale_after` (None: heartbeats alone are never relevant; the runtime's node
    cache judges this on its own clock instead). Becoming stale needs no event: the runtime
    wakes the node's policies at that deadline (`handlers.node_cache`).
    """
    return classify(old, new, watched_condition_types, stale_after) is Change.RELEVANT
