"""`remediation-operator node collect` against the fake node (issue 22): the driver root's
bug report, the kernel log, nvidia-smi and DCGM output, kept on the node itself (a destination
every zone has) or in the mounted claim, then optionally uploaded."""

from __future__ import annotations

import gzip

from remediation_emulator.gpunode import state as fake
from tests.node_program.conftest import FakeNode

LOCATION = "s3://diag/gpu/rem-1/diagnose-1"


def test_everything_is_kept_on_the_node_under_the_runs_location(node: FakeNode) -> None:
    code, result, _ = node.run("collect", "--location", LOCATION, "--upload", "")
    assert (code, result["reason"]) == (0, "DiagnosticsCollected"), result
    out = node.host_root / "var/log/remediation-operator/rem-1/diagnose-1"
    assert sorted(p.name for p in out.iterdir()) == [
        "dcgm-diag.txt",
        "kernel.log",
        "nvidia-smi.xml",
        "remediation-bug-report.log.gz",
    ]
    assert "Xid" in (out / "kernel.log").read_text()
    assert "<uuid>" in (out / "nvidia-smi.xml").read_text()
    with gzip.open(out / "remediation-bug-report.log.gz", "rt") as report:
        assert "nvidia-bug-report" in report.read()


def test_a_claim_directory_wins_and_an_upload_runs_after(node: FakeNode) -> None:
    claim = node.host_root.parent / "claim"
    copy = node.host_root.parent / "uploaded"
    code, result, _ = node.run(
        "collect",
        "--location",
        LOCATION,
        "--claim-dir",
        str(claim),
        "--upload",
        f"cp -r {{dir}} {copy}",
    )
    assert code == 0, result
    assert (claim / "kernel.log").exists()
    assert (copy / "kernel.log").exists(), "the upload command got the directory"
    assert result["actions"][-1] == "upload -> exit 0"


def test_without_journald_the_kernel_log_comes_from_dmesg_and_parts_that_fail_are_named(
    node: FakeNode,
) -> None:
    node.write(fake.node(2, journald=False, driver_loaded=False, hostengine=False))
    code, result, _ = node.run("collect", "--location", LOCATION)
    out = node.host_root / "var/log/remediation-operator/rem-1/diagnose-1"
    assert (out / "kernel.log").read_text().startswith("NVRM: Xid")
    assert code == 0, "what could be collected was"
    assert "not collected: nvidia-smi" in result["message"]
    assert {"check": "nvidia-smi", "gpu": "", "detail": result["failedChecks"][0]["detail"]} in (
        result["failedChecks"]
    )
    assert not (out / "dcgm-diag.txt").exists(), "no host engine: no second one started"
