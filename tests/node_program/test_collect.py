"""`remediation-operator node collect` against the fake node (issue 22): the driver root's
bug report, the kernel log, nvidia-smi and DCGM output, kept on the node itself (a destination
every zone has) or in the mounted claim, then optionally uploaded."""

from __future__ import annotations

import gzip

from remediation_emulator.gpunode import state as fake
from tests.node_program.conftest import FakeNode

LOCATION = "s3://diag/gpu/rem-1/diagnose-1"


def test_a_hostpath_destination_keeps_everything_in_that_directory_on_the_node(
    node: FakeNode,
) -> None:
    location = "hostpath:///var/log/gpu-diagnostics/rem-1/diagnose-1"
    code, result, _ = node.run("collect", "--location", location, "--upload", "")
    assert (code, result["reason"]) == (0, "DiagnosticsCollected"), result
    out = node.host_root / "var/log/gpu-diagnostics/rem-1/diagnose-1"
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
    shown = "in /var/log/gpu-diagnostics/rem-1/diagnose-1"
    assert shown in result["message"], "the directory as the node sees it"


def test_an_object_store_without_an_uploader_fails_naming_where_the_files_are_kept(
    node: FakeNode,
) -> None:
    """The shipped template has no uploader: the Remediation must not record an s3:// place
    that holds nothing as collected."""
    code, result, message = node.run("collect", "--location", LOCATION)
    assert (code, result["reason"]) == (1, "DiagnosticsNotUploaded"), result
    out = node.host_root / "var/log/remediation-operator/rem-1/diagnose-1"
    assert (out / "kernel.log").exists(), "kept on the node all the same"
    assert "kept on the node in /var/log/remediation-operator/rem-1/diagnose-1" in message
    assert f"not sent to {LOCATION}" in message


def test_a_hostpath_that_climbs_out_is_refused_and_writes_nothing(node: FakeNode) -> None:
    code, result, _ = node.run("collect", "--location", "hostpath:///var/../../etc/rem-1/d-1")
    assert (code, result["reason"]) == (2, "BadArguments"), result
    assert "'..'" in result["message"]
    assert not (node.host_root / "etc/rem-1").exists()


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
    location = "hostpath:///var/log/remediation-operator/rem-1/diagnose-1"
    code, result, _ = node.run("collect", "--location", location)
    out = node.host_root / "var/log/remediation-operator/rem-1/diagnose-1"
    assert (out / "kernel.log").read_text().startswith("NVRM: Xid")
    assert code == 0, "what could be collected was"
    assert "not collected: nvidia-smi" in result["message"]
    assert {"check": "nvidia-smi", "gpu": "", "detail": result["failedChecks"][0]["detail"]} in (
        result["failedChecks"]
    )
    assert not (out / "dcgm-diag.txt").exists(), "no host engine: no second one started"


def test_a_failed_upload_fails_and_says_the_files_are_on_the_node(node: FakeNode) -> None:
    code, result, _ = node.run("collect", "--location", LOCATION, "--upload", "false {dir}")
    assert (code, result["reason"]) == (1, "DiagnosticsIncomplete"), result
    kept = "/var/log/remediation-operator/rem-1/diagnose-1"
    assert result["message"].startswith(f"collected 4 file(s) in {kept}"), result["message"]
    assert "not collected: upload" in result["message"]
