"""The chart's node-problem-detector rules, run the way NPD runs them, on real kernel lines.

NPD's kernel monitor (pkg/systemlogmonitor) compiles each rule's pattern with Go's regexp
(RE2 syntax) with `\\z` appended, keeps the last `bufferSize` lines joined by newlines, and
reports a rule when the pattern matches at the end of that buffer. Here the same patterns run
on RE2 (google-re2) over the same buffer shape. The sample lines are NVIDIA driver output of
several generations, as posted in public bug reports, forums and tool fixtures:

- 2012-era drivers (R295-R310): no "PCI:" prefix, raw register words after the XID;
- drivers around 2020 (R4xx): "pid=N" and no process name;
- R5xx and later: "pid=N, name=..." or "pid='<unknown>', name=<unknown>", the message after;
- Grace systems: a non-zero PCI domain (PCI:0004:01:00).

Every sample must raise exactly the reason the default policy expects for its XID, and no
kernel line without an XID (including NVSwitch SXid lines and NVRM lines about the same
fault) may match any rule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import re2

from remediation_operator.domain import matching
from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.sim import study
from tests.default_policy.test_xid_coverage import CATALOG, NOW

ROOT = Path(__file__).resolve().parents[2]
NPD = ROOT / "charts" / "remediation-operator" / "npd"
KERNEL_MONITOR = NPD / "gpu-kernel-monitor.json"
DCGM_MONITOR = NPD / "dcgm-health-monitor.json"
POLICY = ROOT / "examples" / "gpu-xid-ladders-policy.yaml"


@dataclass(frozen=True)
class Rule:
    kind: str
    reason: str
    condition: str | None
    pattern: Any


def load_rules() -> tuple[dict[str, Any], list[Rule]]:
    config = json.loads(KERNEL_MONITOR.read_text(encoding="utf-8"))
    rules = [
        Rule(
            r["type"],
            r["reason"],
            r.get("condition"),
            # NPD: regexp.Compile(expr + `\z`), then FindStringIndex on the joined buffer.
            re2.compile(r["pattern"] + r"\z"),
        )
        for r in config["rules"]
    ]
    return config, rules


CONFIG, RULES = load_rules()

LINES = Path(__file__).with_name("kernel_lines.txt")


def read_lines() -> tuple[list[tuple[int, str]], list[str]]:
    """(XID, line) samples and lines without an XID, from kernel_lines.txt."""
    samples: list[tuple[int, str]] = []
    others: list[str] = []
    for raw in LINES.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        head, _, line = raw.partition(" ")
        if head == "-":
            others.append(line)
        else:
            samples.append((int(head), line))
    return samples, others


SAMPLES, NON_XID = read_lines()

PREFIXES = ("", "[ 3947.590120] ", "kernel: [16450076.435595] ")
"""As /dev/kmsg gives the line, as dmesg prints it, as a syslog file keeps it (NPD's filelog
plugin): the patterns are anchored at the end only, as NPD anchors them."""


def fired(buffer: Sequence[str]) -> list[Rule]:
    """The rules NPD reports when the last line of `buffer` arrives."""
    joined = "\n".join(buffer)
    return [rule for rule in RULES if rule.pattern.search(joined) is not None]


def expected_reason(xid: int) -> tuple[str, str]:
    bucket, _ = CATALOG[xid]
    if bucket.ladder is None:
        return "temporary", f"NvidiaXID{xid}Warning"
    return "permanent", f"NvidiaXID{xid}Error"


@pytest.mark.parametrize(
    ("xid", "line"), SAMPLES, ids=[f"xid{x}-{i}" for i, (x, _) in enumerate(SAMPLES)]
)
@pytest.mark.parametrize("prefix", PREFIXES, ids=("kmsg", "dmesg", "syslog"))
def test_each_real_xid_line_raises_exactly_its_reason(xid: int, line: str, prefix: str) -> None:
    before = "NVRM: GPU at PCI:0000:3b:00: GPU-aeab3757-56a6-7e30-3f7c-1f322454bde2"
    rules = fired([before, prefix + line])
    assert [(r.kind, r.reason) for r in rules] == [expected_reason(xid)]


@pytest.mark.parametrize("line", NON_XID)
@pytest.mark.parametrize("prefix", PREFIXES, ids=("kmsg", "dmesg", "syslog"))
def test_no_kernel_line_without_an_xid_matches(line: str, prefix: str) -> None:
    assert fired([prefix + line]) == []


def test_an_xid_line_is_reported_once_not_again_on_the_next_line() -> None:
    # NPD matches against the joined buffer at its end: a rule must not fire again for the
    # XID line still in the buffer when an unrelated line arrives after it.
    xid_line = next(line for xid, line in SAMPLES if xid == 79)
    assert fired([xid_line, "NVRM: GPU 0000:4e:00.0: GPU has fallen off the bus."]) == []


def test_an_xid_with_a_longer_number_is_not_taken_for_a_shorter_one() -> None:
    assert fired(["NVRM: Xid (PCI:0000:3b:00): 790, pid=1, name=x, not a real XID"]) == []
    assert fired(["NVRM: Xid (PCI:0000:3b:00): 1479, pid=1, name=x, not a real XID"]) == []


def test_every_catalog_xid_has_one_rule_and_it_agrees_with_the_policy() -> None:
    # The kernel monitor reports every catalog XID: a condition reason for those the default
    # policy acts on, an Event for those it deliberately leaves alone (the EKS agent's split).
    by_reason = {r.reason: r for r in RULES}
    assert len(by_reason) == len(RULES)  # one rule per reason
    policy = study.load_policy(POLICY)
    for xid in CATALOG:
        kind, reason = expected_reason(xid)
        rule = by_reason.get(reason)
        assert rule is not None, xid
        assert rule.kind == kind, xid
        if kind == "permanent":
            assert rule.condition == "GPUProblem"
            node = NodeView(
                name="gpu-1",
                conditions=(Condition("GPUProblem", "True", reason, observed_at=NOW),),
            )
            found = matching.match(node, policy.faults, NOW)
            assert found is not None, xid
            assert found.fault.name != "gpu-npd-problem", f"XID {xid} fell to the generic rule"
    assert {r.reason for r in RULES} == {expected_reason(x)[1] for x in CATALOG}


def test_the_conditions_the_monitors_declare() -> None:
    # The kernel monitor's condition starts False ("no problem"): NPD's convention, which the
    # default policy's GPUProblem rules (status True) follow.
    assert CONFIG["plugin"] == "kmsg"
    assert [c["type"] for c in CONFIG["conditions"]] == ["GPUProblem"]
    assert {r.condition for r in RULES if r.kind == "permanent"} == {"GPUProblem"}
    dcgm = json.loads(DCGM_MONITOR.read_text(encoding="utf-8"))
    assert dcgm["plugin"] == "custom"
    # A different type from the kernel monitor's: NPD's monitors would overwrite each other's
    # condition of the same type (the plugin resets it to False at every healthy check).
    assert [c["type"] for c in dcgm["conditions"]] == ["DCGMHealthProblem"]
    policy = study.load_policy(POLICY)
    node = NodeView(
        name="gpu-1",
        conditions=(Condition("DCGMHealthProblem", "True", "DCGMHealthFailure", observed_at=NOW),),
    )
    found = matching.match(node, policy.faults, NOW)
    assert found is not None
    assert found.fault.name == "gpu-dcgm-health"
