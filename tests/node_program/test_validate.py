"""`remediation-operator node validate` against the fake node (issue 22): real row-remap and
SRAM checks naming the GPU, DCGM against the node's host engine (never a second one), and no
verdict while the GPU stack is not ready."""

from __future__ import annotations

from remediation_emulator.gpunode import state as fake
from tests.node_program.conftest import FakeNode

UUIDS = [fake.gpu(i)["uuid"] for i in range(8)]


def test_a_healthy_node_passes_with_dcgm_on_the_host_engine(node: FakeNode) -> None:
    code, result, _ = node.run("validate", "--level", "3", "--expected-gpus", "8")
    assert (code, result["reason"]) == (0, "ValidationPassed"), result
    assert "DCGM diag level 3" in result["message"]
    dcgm = [c for c in node.read()["calls"] if c[0] == "dcgmi"]
    assert dcgm == [["dcgmi", "diag", "-r", "3", "--host", "localhost:5555"]]


def test_a_failed_row_remap_is_named_with_its_gpu(node: FakeNode) -> None:
    node.write(fake.node([fake.gpu(0), fake.gpu(1, remap_failed=True)]))
    code, result, _ = node.run("validate")
    assert (code, result["outcome"]) == (2, "PermanentFailure")
    assert result["failedChecks"] == [
        {"check": "row-remap-failure", "gpu": UUIDS[1], "detail": "failed"}
    ]


def test_a_dcgm_failure_fails_the_validation(node: FakeNode) -> None:
    node.write(fake.node(2, diag_failure={"gpu": 1, "test": "Memory"}))
    code, result, _ = node.run("validate")
    assert (code, result["reason"]) == (2, "ValidationFailed")
    assert result["failedChecks"] == [
        {"check": "dcgm: Memory", "gpu": UUIDS[1], "detail": "Fail - GPU: 1"}
    ], "the failed test on the GPU DCGM names"
    assert f"dcgm: Memory on {UUIDS[1]}" in result["message"]


def test_without_a_host_engine_no_second_one_is_started(node: FakeNode) -> None:
    node.write(fake.node(2, hostengine=False))
    code, result, _ = node.run("validate")
    assert (code, result["reason"]) == (0, "ValidationPassed")
    assert "DCGM skipped" in result["message"]
    assert not [c for c in node.read()["calls"] if c[0] == "nv-hostengine"]


def test_a_gpu_missing_fails_and_a_stack_not_ready_gives_no_verdict(node: FakeNode) -> None:
    node.write(fake.node(7))
    code, result, _ = node.run("validate", "--expected-gpus", "8")
    assert (code, result["failedChecks"][0]["check"]) == (2, "gpu-count")
    node.write(fake.node(8, driver_loaded=False))
    code, result, _ = node.run("validate", "--ready-timeout", "0")
    assert (code, result["outcome"], result["reason"]) == (3, "NotRun", "GpuStackNotReady")


def test_gpu_operator_nodes_wait_for_the_validator(node: FakeNode) -> None:
    driver = node.host_root / "run/nvidia/driver/usr/bin"
    driver.mkdir(parents=True)
    (driver / "nvidia-smi").write_text("")
    code, result, _ = node.run("validate", "--ready-timeout", "0")
    assert (code, result["reason"]) == (3, "GpuStackNotReady")
    assert "driver-ready, toolkit-ready" in result["message"]


def test_dcgm_failures_are_read_per_test_and_gpu_from_its_table() -> None:
    """DCGM 3.3's `dcgmi diag -r 3` table as a real node prints it (a failed GPU on the
    continuation row of its test); ids are NVML indexes, named by UUID."""
    from remediation_operator.node.smi import Gpu, Query
    from remediation_operator.node.validate import failed_tests

    table = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.9                                          |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Power            | Pass - GPUs: 0, 2, 3                           |
|                           | Fail - GPU: 1                                  |
| Warning                   | GPU 1 Max power of 224.1 did not reach desire  |
| Memory Bandwidth          | Fail - GPUs: 2, 3                              |
| EUD Test                  | Skip - All                                     |
+---------------------------+------------------------------------------------+
"""
    gpus = tuple(Gpu("", UUIDS[i], False, (), "N/A", False, False, False) for i in range(3))
    checks = failed_tests(table, Query(attached=3, gpus=gpus))
    assert [(c.name, c.gpu) for c in checks] == [
        ("dcgm: Targeted Power", UUIDS[1]),
        ("dcgm: Memory Bandwidth", UUIDS[2]),
        ("dcgm: Memory Bandwidth", "GPU 3"),
    ]
