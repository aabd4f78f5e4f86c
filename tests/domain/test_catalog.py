"""The GPU fault catalog (`domain.catalog`): every row present once, with the facts its sources
state, and the chart's node-problem-detector raising exactly the catalog's condition XIDs."""

from __future__ import annotations

import json
from pathlib import Path

from remediation_operator.domain import catalog
from remediation_operator.domain.catalog import Bucket
from remediation_operator.domain.policy import Action

ROOT = Path(__file__).resolve().parents[2]
KERNEL_MONITOR = ROOT / "charts" / "remediation-operator" / "npd" / "gpu-kernel-monitor.json"

C, D, R, B, P = Action.Cordon, Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace


def test_every_xid_of_the_catalog_is_listed_once_with_its_bucket() -> None:
    codes = [e.code for e in catalog.XIDS]
    assert codes == list(range(1, 163))
    by_code = {e.code: e for e in catalog.XIDS}
    # Rows the 2026 catalog changed or that the shipped policy read wrongly (issue 23).
    assert by_code[121].bucket is Bucket.IGNORE  # C2C_ERROR: informational
    assert by_code[79].bucket is Bucket.RESTART_BM  # a power cycle, not a warm reboot
    assert by_code[48].bucket is Bucket.WORKFLOW_XID_48
    assert {by_code[x].bucket for x in range(144, 151)} == {Bucket.WORKFLOW_NVLINK5_ERR}
    assert by_code[154].bucket is Bucket.FOLLOW_OTHER_XID
    assert by_code[160].bucket is Bucket.RESTART_BM
    assert all(e.source == catalog.XID_SOURCE for e in catalog.XIDS)


def test_the_ladder_each_bucket_suggests() -> None:
    by_code = {e.code: e for e in catalog.XIDS}
    assert by_code[62].ladder == (C, D, R, B, P)  # RESET_GPU
    assert by_code[48].ladder == (C, D, R, P)  # reset, then RMA
    assert by_code[79].ladder == (C, D, P)  # no warm reboot for a GPU off the bus
    assert by_code[13].ladder == ()  # RESTART_APP: the application's problem
    assert by_code[63].ladder == ()  # IGNORE
    assert by_code[1].ladder == (C,)  # report the issue: hold for a human


def test_dcgm_codes_are_dcgm_errors_h_numbers() -> None:
    by_code = {e.code: e for e in catalog.DCGM_CODES}
    assert [e.code for e in catalog.DCGM_CODES] == list(range(1, 112))
    assert by_code[4].name == "DCGM_FR_VOLATILE_DBE_DETECTED"
    assert by_code[4].bucket is Bucket.RESET_GPU
    assert by_code[40].name == "DCGM_FR_THERMAL_VIOLATIONS"
    assert by_code[85].name == "DCGM_FR_PENDING_ROW_REMAP"
    assert by_code[101].bucket is Bucket.NONE  # an XID: the XID's own rule decides
    assert by_code[111].name == "DCGM_FR_NAN_VALUE"


def test_the_eks_agents_condition_xids_are_its_2026_list() -> None:
    # aws/eks-node-monitoring-agent, monitors/nvidia/dcgm/dcgm_policies.go, WellKnownXidCodes.
    assert sorted(catalog.EKS_CONDITION_XIDS) == [
        46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151,
        155, 156, 158,
    ]  # fmt: skip
    assert not {13, 31, 94, 121} & catalog.EKS_CONDITION_XIDS  # Events only since 2026


def test_the_charts_kernel_monitor_raises_the_catalogs_condition_xids() -> None:
    rules = json.loads(KERNEL_MONITOR.read_text(encoding="utf-8"))["rules"]
    raised = {
        int(r["reason"].removeprefix("NvidiaXID").removesuffix("Error"))
        for r in rules
        if r["type"] == "permanent"
    }
    assert raised == catalog.NPD_CONDITION_XIDS


def test_every_report_names_its_source_agent_and_a_condition_the_agent_sets() -> None:
    reports = catalog.reports()
    eks = [r for r in reports if r.agent == "eks-node-monitoring-agent"]
    npd = [r for r in reports if r.agent == "node-problem-detector"]
    assert {r.entry.code for r in eks if r.entry.kind == "XID"} == catalog.EKS_CONDITION_XIDS
    assert all((r.type, r.status) == ("AcceleratedHardwareReady", "False") for r in eks)
    assert all((r.type, r.status) == ("GPUProblem", "True") for r in npd)
    recoveries = [r for r in npd if r.entry.code == 154]
    assert {r.entry.bucket for r in recoveries} == {Bucket.RESET_GPU, Bucket.NODE_REBOOT}
    assert all("GPU recovery action changed from 0x0 (None) to" in r.message for r in recoveries)
