"""Every XID of NVIDIA's catalog gets an explicit decision under the shipped default policy.

The table below is the catalog as the project's reference lists it
(`../shared/reference/gpu-faults.md`, NVIDIA "Analyzing Xid Errors with the Xid Catalog",
2025): each XID with its immediate-action bucket, and the ladder that bucket suggests, or no
node action. The test feeds each XID to the policy's real matcher as the EKS node monitoring
agent publishes it (`AcceleratedHardwareReady=False`, reason `NvidiaXID<N>Error`) and as the
chart's node-problem-detector kernel monitor does (`GPUProblem=True`, same reason), and checks
that the rule it lands on climbs the bucket's ladder. A reason no rule knows must land on the
conservative catch-all (cordon and hold), never on nothing and never on a disruptive ladder.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediation_operator.domain import catalog as domain_catalog
from remediation_operator.domain import matching
from remediation_operator.domain.catalog import Bucket as Bucket_
from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.policy import Action, Fault, OnExhausted, Policy
from remediation_operator.sim import study

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "gpu-xid-ladders-policy.yaml"
CHART_VALUES = ROOT / "charts" / "remediation-operator" / "values.yaml"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

C, D, R, B, P = Action.Cordon, Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace


@dataclass(frozen=True)
class Bucket:
    name: str
    ladder: tuple[Action, ...] | None
    """The ladder the bucket suggests (reference table); None: no node action."""


IGNORE = Bucket("IGNORE (informational)", None)
RESTART_APP = Bucket("RESTART_APP (the application's problem)", None)
RESET_GPU = Bucket("RESET_GPU", (C, D, R, B, P))
XID_48 = Bucket("WORKFLOW_XID_48", (C, D, R, P))
NVLINK = Bucket("WORKFLOW_NVLINK_ERR", (C, D, R, B, P))
RESTART_BM = Bucket("RESTART_BM / RESTART_VM", (C, D, P))  # a power cycle, not a warm reboot
CONTACT_SUPPORT = Bucket("CONTACT_SUPPORT / CHECK_MECHANICALS", (C, D, P))

CATALOG: dict[int, tuple[Bucket, str]] = {
    # XID: (bucket, where the reference, or the source named, puts it)
    13: (RESTART_APP, "reference: RESTART_APP names XID 13"),
    31: (RESTART_APP, "reference: RESTART_APP names XID 31"),
    94: (RESTART_APP, "reference: RESTART_APP names XID 94"),
    43: (IGNORE, "reference: IGNORE lists 43"),
    63: (IGNORE, "reference: IGNORE lists 63 (EKS replaces; we follow NVIDIA)"),
    92: (IGNORE, "reference: IGNORE lists 92"),
    **{
        x: (RESET_GPU, "reference: immediate bucket RESET_GPU")
        for x in (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158)
    },
    48: (XID_48, "reference: WORKFLOW_XID_48 (double-bit ECC)"),
    74: (NVLINK, "reference: WORKFLOW_NVLINK_ERR (NVLink); EKS replaces"),
    **{x: (NVLINK, "reference: NVLink5, fatal sub-codes mean RESET_GPU") for x in range(144, 151)},
    121: (IGNORE, "NVIDIA catalog 2026: C2C_ERROR, IGNORE; the EKS agent: an Event only"),
    79: (RESTART_BM, "reference: RESTART_BM (fell off the bus)"),
    151: (RESTART_BM, "reference: RESTART_VM"),
    160: (RESTART_BM, "NVIDIA catalog 2026: CHANNEL_RETIREMENT_EVENT, RESTART_BM"),
    54: (CONTACT_SUPPORT, "reference: CHECK_MECHANICALS / CONTACT_SUPPORT"),
    61: (CONTACT_SUPPORT, "reference: CONTACT_SUPPORT"),
    142: (CONTACT_SUPPORT, "EKS agent (dcgm_policies.go): NVENC3 error, CONTACT_SUPPORT"),
    154: (RESET_GPU, "recovery action named in the message only; cheapest first, then climb"),
}
"""Every XID the reference names, plus 121, 142 and 154 (named by issue 15 and the EKS agent)."""

CATCH_ALL = "gpu-unknown-reason"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return study.load_policy(POLICY)


def shown(policy: Policy, type_: str, status: str, reason: str) -> Fault | None:
    node = NodeView(
        name="gpu-1",
        labels={"nvidia.com/gpu.present": "true"},
        conditions=(
            Condition("Ready", "True", "KubeletReady", observed_at=NOW),
            Condition(type_, status, reason, last_heartbeat_time=NOW, observed_at=NOW),
        ),
    )
    found = matching.match(node, policy.faults, NOW)
    return None if found is None else found.fault


def ladder(fault: Fault) -> tuple[Action, ...]:
    return tuple(step.action for step in fault.ladder)


@pytest.mark.parametrize("xid", sorted(CATALOG), ids=lambda x: f"xid{x}")
def test_each_catalog_xid_reported_by_the_eks_agent_gets_its_buckets_decision(
    policy: Policy, xid: int
) -> None:
    bucket, source = CATALOG[xid]
    fault = shown(policy, "AcceleratedHardwareReady", "False", f"NvidiaXID{xid}Error")
    if bucket.ladder is None:
        assert fault is None, f"XID {xid} ({bucket.name}; {source}) must get no node action"
    else:
        assert fault is not None, f"XID {xid} ({bucket.name}) matches no rule"
        assert fault.name != CATCH_ALL, f"XID {xid} ({bucket.name}) fell to the catch-all"
        assert ladder(fault) == bucket.ladder, f"XID {xid}: {bucket.name}; {source}"


@pytest.mark.parametrize(
    "xid", sorted(x for x, (b, _) in CATALOG.items() if b.ladder is not None), ids=str
)
def test_node_problem_detector_reports_reach_the_same_rule(policy: Policy, xid: int) -> None:
    eks = shown(policy, "AcceleratedHardwareReady", "False", f"NvidiaXID{xid}Error")
    npd = shown(policy, "GPUProblem", "True", f"NvidiaXID{xid}Error")
    assert eks is not None
    assert npd is not None
    assert npd.name == eks.name


def test_an_xid_outside_the_catalog_is_cordoned_and_held(policy: Policy) -> None:
    unknown = [x for x in range(0, 1200) if x not in CATALOG]
    for xid in unknown:
        fault = shown(policy, "AcceleratedHardwareReady", "False", f"NvidiaXID{xid}Error")
        assert fault is not None, xid
        assert fault.name == CATCH_ALL, xid
    catch_all = next(f for f in policy.faults if f.name == CATCH_ALL)
    assert ladder(catch_all) == (C,)
    assert catch_all.on_exhausted is OnExhausted.Hold
    assert catch_all is policy.faults[-1]  # "a reason no rule knows": every rule comes first


@pytest.mark.parametrize(
    "reason",
    [
        "NeuronDMAError",
        "NvidiaSomethingNew",
        "GPUOnFire",
        "",
        "N",
        "Nvidia",
        "NvidiaXI",
        "NvidiaXID",
        "NvidiaXIDError",
        "NvidiaXID79",
        "NvidiaXID13Warning",
        "NvidiaXID79Errors!",
        "xNvidiaXID13Error",
    ],
)
def test_an_unknown_reason_is_cordoned_and_held(policy: Policy, reason: str) -> None:
    fault = shown(policy, "AcceleratedHardwareReady", "False", reason)
    assert fault is not None
    assert fault.name == CATCH_ALL


@pytest.mark.parametrize(
    ("type_", "status", "reason", "expected"),
    [
        # The EKS agent's other AcceleratedHardwareReady condition reasons
        # (aws/eks-node-monitoring-agent docs/node-health-issues.adoc).
        ("AcceleratedHardwareReady", "False", "NvidiaDoubleBitError", "gpu-double-bit-ecc"),
        ("AcceleratedHardwareReady", "False", "NvidiaNVLinkError", "gpu-nvlink"),
        ("AcceleratedHardwareReady", "False", "NvidiaFabricError", "gpu-contact-support"),
        ("AcceleratedHardwareReady", "False", "NvidiaDeviceCountMismatch", "gpu-unreachable"),
        ("AcceleratedHardwareReady", "False", "FabricManagerNotRunning", "gpu-fabric-manager"),
        # DCGM health codes by NVIDIA's recovery (domain/catalog.py): 4 VOLATILE_DBE resets,
        # 40 THERMAL_VIOLATIONS replaces, 14 NVLINK_DOWN reboots, 30 LOW_BANDWIDTH is a
        # report-the-issue (held), 5 VOLATILE_SBE is ignored.
        ("AcceleratedHardwareReady", "False", "DCGMHealthCode4", "gpu-dcgm-health"),
        ("AcceleratedHardwareReady", "False", "DCGMHealthCode40", "gpu-dcgm-replace"),
        ("AcceleratedHardwareReady", "False", "DCGMHealthCode14", "gpu-dcgm-reboot"),
        ("AcceleratedHardwareReady", "False", "DCGMHealthCode30", "gpu-unknown-reason"),
        ("AcceleratedHardwareReady", "False", "DCGMHealthCode5", None),
        ("AcceleratedHardwareReady", "False", "DCGMDiagnosticFailure", "gpu-dcgm-health"),
        ("AcceleratedHardwareReady", "False", "DCGMError", "gpu-health-unknown"),
        ("AcceleratedHardwareReady", "True", "NvidiaXID79Error", None),
        # NetworkingReady / KernelReady: False only for the agent's fatal findings.
        ("NetworkingReady", "False", "InterfaceNotUp", "node-networking"),
        ("NetworkingReady", "False", "InterfaceNotRunning", "node-networking"),
        ("NetworkingReady", "False", "MissingLoopbackInterface", "node-networking"),
        ("NetworkingReady", "False", "IPAMDNotReady", "node-networking"),
        ("NetworkingReady", "False", "IPAMDNotRunning", "node-networking"),
        ("NetworkingReady", "False", "NPANotRunning", "node-networking"),
        ("NetworkingReady", "True", "NetworkingIsReady", None),
        ("KernelReady", "False", "ForkFailedOutOfPIDs", "node-kernel"),
        ("KernelReady", "True", "KernelIsReady", None),
        # StorageReady: False only for InstanceStoreIOError (pkg/reasons/reasons.yaml).
        ("StorageReady", "False", "InstanceStoreIOError", "node-storage"),
        ("StorageReady", "True", "StorageIsReady", None),
        # The control plane's Ready: the kubelet's NotReady, the node lifecycle controller's
        # Unknown ("Kubelet stopped posting node status").
        ("Ready", "False", "KubeletNotReady", "host-unreachable"),
        ("Ready", "Unknown", "NodeStatusUnknown", "host-unreachable"),
        ("Ready", "True", "KubeletReady", None),
    ],
)
def test_the_agents_other_reasons(
    policy: Policy, type_: str, status: str, reason: str, expected: str | None
) -> None:
    fault = shown(policy, type_, status, reason)
    assert (None if fault is None else fault.name) == expected


def test_network_and_kernel_faults_never_reset_a_gpu(policy: Policy) -> None:
    for name in ("node-networking", "node-kernel"):
        fault = next(f for f in policy.faults if f.name == name)
        assert ladder(fault) == (C, D, B, P)


def test_a_failed_drive_is_replaced_without_a_reboot(policy: Policy) -> None:
    fault = next(f for f in policy.faults if f.name == "node-storage")
    assert ladder(fault) == (C, D, P)


def test_an_unreachable_host_is_cordoned_then_replaced_on_the_control_planes_verdict(
    policy: Policy,
) -> None:
    fault = next(f for f in policy.faults if f.name == "host-unreachable")
    assert ladder(fault) == (C, P)
    unknown = next(m for m in fault.match if m.status == "Unknown")
    assert unknown.positive_after == timedelta(minutes=30)  # EKS node repair, Karpenter
    # Less severe than every GPU fault: a node our own Reboot takes NotReady stays in its
    # GPU incident (the first listed fault a node shows is the one it takes).
    names = [f.name for f in policy.faults]
    gpu = [n for n in names if n.startswith("gpu-") and n not in ("gpu-health-unknown",)]
    gpu = [n for n in gpu if n not in ("gpu-unknown-reason",)]
    assert all(names.index(n) < names.index("host-unreachable") for n in gpu)


DEVIATIONS: dict[tuple[str, int, Bucket_], str] = {
    ("XID", 61, Bucket_.UNEXPECTED_ERR_REPORT_ISSUE): (
        "PMU breakpoint: hardware with no automated recovery; replaced, not held"
    ),
    ("XID", 142, Bucket_.UNEXPECTED_ERR_REPORT_ISSUE): (
        "NVENC3 engine failure; the EKS agent reads it as CONTACT_SUPPORT: replace"
    ),
}
"""Where the shipped policy departs from the catalog's suggestion on purpose, and why."""


@pytest.mark.parametrize(
    "report",
    domain_catalog.reports(),
    ids=lambda r: f"{r.entry.kind}{r.entry.code}-{r.agent}-{r.entry.bucket}",
)
def test_every_catalog_reason_gets_the_catalogs_ladder(
    policy: Policy, report: domain_catalog.Report
) -> None:
    # domain/catalog.py names each row's source (NVIDIA's catalog, the EKS agent, DCGM).
    entry = report.entry
    node = NodeView(
        name="gpu-1",
        conditions=(
            Condition(report.type, report.status, report.reason, report.message, observed_at=NOW),
        ),
    )
    found = matching.match(node, policy.faults, NOW)
    got = () if found is None else ladder(found.fault)
    why = DEVIATIONS.get((entry.kind, entry.code, entry.bucket))
    if why is not None:
        assert got != entry.ladder, f"{entry.kind} {entry.code} follows the catalog now: {why}"
        return
    assert got == entry.ladder, f"{entry.kind} {entry.code} {entry.name} ({entry.source})"


def test_every_reason_pattern_of_the_policy_is_re2(policy: Policy) -> None:
    # Reason patterns run on RE2 (no lookarounds); the catch-all is written for it.
    import re2

    for fault in policy.faults:
        for m in fault.match:
            if m.reason is not None:
                assert re2.compile(m.reason) is not None, (fault.name, m.reason)


@pytest.fixture(scope="module")
def chart() -> Policy:
    """The chart's own copy of the default policy (defaultPolicy.spec in values.yaml)."""
    import yaml

    from remediation_operator.api.policy_parsing import parse_policy

    values = yaml.safe_load(CHART_VALUES.read_text(encoding="utf-8"))
    return parse_policy(
        {
            "apiVersion": "remediation.gpuops.io/v1alpha1",
            "kind": "RemediationPolicy",
            "metadata": {"name": values["defaultPolicy"]["name"]},
            "spec": values["defaultPolicy"]["spec"],
        }
    )


def test_the_charts_default_policy_makes_the_same_decisions(policy: Policy, chart: Policy) -> None:
    # The chart renders its own copy (defaultPolicy.spec, DryRun by default); it must treat
    # every XID, and an unknown reason, as the example does.
    sources = [("AcceleratedHardwareReady", "False"), ("GPUProblem", "True")]
    reasons = [f"NvidiaXID{x}Error" for x in (*CATALOG, 8, 45, 999)] + ["SomethingNew"]
    for (type_, status), reason in ((s, r) for s in sources for r in reasons):
        ours, theirs = shown(policy, type_, status, reason), shown(chart, type_, status, reason)
        if type_ == "GPUProblem" and ours is not None and ours.name == "gpu-npd-problem":
            continue  # the example's generic NPD rule; the chart's NPD emits no such reason
        assert (None if theirs is None else (theirs.name, ladder(theirs))) == (
            None if ours is None else (ours.name, ladder(ours))
        ), (type_, reason)


def test_the_chart_reads_two_findings_in_one_report_as_the_example_does(
    policy: Policy, chart: Policy
) -> None:
    # The EKS agent keeps only the newest finding in the reason and appends every finding to
    # the message (D62): XID <n> then XID 63 in one report reads "NvidiaXID63Error" with both
    # in the message. The chart's copy must find the earlier, severe one there too.
    for xid in sorted(domain_catalog.EKS_CONDITION_XIDS - {63}):
        message = (
            f"detected XID-{xid} on the instance, review kernel logs for additional information.;"
            " detected XID-63 on the instance, review kernel logs for additional information."
        )
        node = NodeView(
            name="gpu-1",
            conditions=(
                Condition(
                    "AcceleratedHardwareReady",
                    "False",
                    "NvidiaXID63Error",
                    message,
                    observed_at=NOW,
                ),
            ),
        )
        ours = matching.match(node, policy.faults, NOW)
        theirs = matching.match(node, chart.faults, NOW)
        assert ours is not None, xid
        assert theirs is not None, xid
        assert (theirs.fault.name, ladder(theirs.fault)) == (ours.fault.name, ladder(ours.fault))
        assert ours.fault.name != CATCH_ALL, xid
