"""`remediation-operator node reset` against the fake GPU node (issue 22): one reset command
for every GPU, pre-flight and post-checks, nvidia-smi's exit codes mapped, the GPU clients
stopped and restored."""

from __future__ import annotations

import itertools

import pytest

from remediation_emulator.gpunode import state as fake
from remediation_operator.node import clients, host, platform, reset
from remediation_operator.node.result import Outcome, Result
from tests.node_program.conftest import FakeNode, LabelledNodeApi

UUIDS = [fake.gpu(i)["uuid"] for i in range(8)]


def resets(node: FakeNode) -> list[list[str]]:
    return [c for c in node.read()["calls"] if "--gpu-reset" in c]


def test_one_command_resets_every_gpu(node: FakeNode) -> None:
    code, result, message = node.run("reset")
    assert code == 0, result
    assert (result["outcome"], result["reason"]) == ("Succeeded", "ResetSucceeded")
    (call,) = resets(node)
    assert call == ["nvidia-smi", "--gpu-reset", "-i", ",".join(UUIDS)]
    assert node.read()["resets"] == [UUIDS]
    assert result["platform"]["systemd"] is True
    assert message == result_json(message), "the termination message is the result"


def result_json(message: str) -> str:
    import json

    json.loads(message)
    return message


def test_a_reset_not_supported_is_permanent(node: FakeNode) -> None:
    node.write(fake.node([fake.gpu(0), fake.gpu(1, reset_supported=False)]))
    code, result, _ = node.run("reset")
    assert code == 2
    assert (result["outcome"], result["reason"]) == ("PermanentFailure", "ResetNotSupported")
    assert "not supported" in result["message"]


def test_no_permission_is_permanent(node: FakeNode) -> None:
    node.write(fake.node(2, root=False))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (2, "ResetNoPermission")
    assert "no permission" in result["message"]


def test_a_gpu_that_fell_off_the_bus_skips_the_reset(node: FakeNode) -> None:
    node.write(fake.node([fake.gpu(0), fake.gpu(1, lost=True)]))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (2, "GpuLost")
    assert "fell off the bus" in result["message"]
    assert not resets(node), "no reset is attempted"


def test_fewer_gpus_than_expected_skips_the_reset(node: FakeNode) -> None:
    node.write(fake.node(7))
    code, result, _ = node.run("reset", "--expected-gpus", "8")
    assert (code, result["reason"]) == (2, "GpuMissing")
    assert "7 of 8" in result["message"]
    assert not resets(node)


def test_mig_mode_on_is_not_reset(node: FakeNode) -> None:
    node.write(fake.node([fake.gpu(0, mig=True), fake.gpu(1)]))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (2, "MigEnabled")
    assert result["failedChecks"] == [{"check": "mig-mode", "gpu": UUIDS[0], "detail": "Enabled"}]
    assert not resets(node)


def test_a_busy_gpu_is_a_transient_failure_naming_the_process(node: FakeNode) -> None:
    busy = fake.gpu(3, processes=[{"pid": 4242, "name": "python3"}])
    node.write(fake.node([fake.gpu(0), busy]))
    code, result, _ = node.run("reset")
    assert (code, result["outcome"], result["reason"]) == (1, "Failed", "GpusBusy")
    assert "python3 (4242)" in result["message"]
    assert UUIDS[3] in result["message"]
    assert not resets(node)


def test_a_driver_not_loaded_is_transient(node: FakeNode) -> None:
    node.write(fake.node(2, driver_loaded=False))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (1, "DriverNotLoaded")


def test_a_gpu_missing_after_the_reset_is_permanent(node: FakeNode) -> None:
    node.write(fake.node(2, missing_after_reset=[UUIDS[1]]))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (2, "GpuMissingAfterReset")


def test_the_fabric_is_waited_for_and_a_fabric_that_never_completes_fails(node: FakeNode) -> None:
    nvswitch = [fake.gpu(i, fabric="Completed") for i in range(2)]
    node.write(fake.node(nvswitch, fabric_settle=2))
    code, result, _ = node.run("reset", "--fabric-timeout", "30")
    assert (code, result["reason"]) == (0, "ResetSucceeded"), result
    node.write(fake.node(nvswitch, fabric_settle=1000))
    code, result, _ = node.run("reset", "--fabric-timeout", "0")
    assert (code, result["reason"]) == (2, "ResetDidNotHeal")
    assert {"check": "fabric-state", "gpu": UUIDS[0], "detail": "In Progress"} in result[
        "failedChecks"
    ]


def test_a_failed_row_remap_or_sram_threshold_after_the_reset_is_permanent(
    node: FakeNode,
) -> None:
    node.write(fake.node([fake.gpu(0), fake.gpu(1, remap_failed=True, sram_exceeded=True)]))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (2, "ResetDidNotHeal")
    failed = {(c["check"], c["gpu"]) for c in result["failedChecks"]}
    assert failed == {("row-remap-failure", UUIDS[1]), ("sram-threshold", UUIDS[1])}


def test_a_pending_row_remap_is_applied_by_the_reset(node: FakeNode) -> None:
    node.write(fake.node([fake.gpu(0, remap_pending=True), fake.gpu(1)]))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (0, "ResetSucceeded")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def run_with_clients(node: FakeNode, api: LabelledNodeApi) -> Result:
    found = platform.detect(str(node.host_root))
    preset = clients.PRESETS["gpu-operator"]
    clock = Clock()
    gpu_clients = clients.GpuClients(api, "gpu-1", preset, clock.sleep, clock.monotonic)
    settings = reset.Settings(clients_timeout=60)
    return reset.Reset(found, host.run, gpu_clients, settings, clock.sleep, clock.monotonic)()


def test_the_gpu_clients_are_stopped_for_the_reset_and_restored(node: FakeNode) -> None:
    node.write(fake.node(2, holders=["nvidia-device-plugin", "nv-hostengine"]))
    api = LabelledNodeApi(node, clients.PRESETS["gpu-operator"].labels)
    api.labels_now = {"nvidia.com/gpu.deploy.dcgm": "true"}

    result = run_with_clients(node, api)

    assert result.outcome is Outcome.Succeeded, result.message
    stop, restore = api.writes
    assert stop == {f"nvidia.com/gpu.deploy.{c}": "false" for c in clients.GPU_OPERATOR_COMPONENTS}
    assert restore == {
        "nvidia.com/gpu.deploy.device-plugin": None,
        "nvidia.com/gpu.deploy.gpu-feature-discovery": None,
        "nvidia.com/gpu.deploy.dcgm-exporter": None,
        "nvidia.com/gpu.deploy.dcgm": "true",
    }, "labels are put back as they were"
    assert api.labels_now == {"nvidia.com/gpu.deploy.dcgm": "true"}
    assert [a.split(":")[0] for a in result.actions] == [
        "stopped GPU clients",
        "--gpu-reset -i " + ",".join(UUIDS[:2]) + " -> exit 0",
        "restored GPU clients",
    ]


def test_clients_that_do_not_stop_fail_the_reset_and_are_restored(node: FakeNode) -> None:
    node.write(fake.node(2, holders=["nvidia-device-plugin"]))
    api = LabelledNodeApi(node, clients.PRESETS["gpu-operator"].labels, stubborn=True)

    result = run_with_clients(node, api)

    assert (result.outcome, result.reason) == (Outcome.Failed, "GpuClientsRunning")
    assert "gpu-operator/nvidia-device-plugin-x" in result.message
    assert not resets(node)
    assert api.labels_now == {}, "restored"


def test_without_stopping_the_clients_the_reset_fails_busy(node: FakeNode) -> None:
    """What the shell template did: the device plugin holds the GPUs and nvidia-smi refuses."""
    node.write(fake.node(2, holders=["nvidia-device-plugin"]))
    code, result, _ = node.run("reset")
    assert (code, result["reason"]) == (1, "ResetFailed")
    assert "other error" in result["message"]
    assert "In use by another client" in result["message"]


def test_presets_and_custom_clients_are_checked() -> None:
    custom = clients.preset("custom", ["example.com/gpu-clients=off"], ["kube-system/app=dp"])
    assert custom.labels == {"example.com/gpu-clients": "off"}
    assert custom.pods == (clients.PodSet("kube-system", "app=dp"),)
    for name, labels, pods in (
        ("nope", [], []),
        ("custom", ["novalue"], []),
        ("custom", [], ["noslash"]),
    ):
        with pytest.raises(ValueError, match=r"^--"):
            clients.preset(name, labels, pods)
    assert list(itertools.chain(clients.PRESETS)) == ["gpu-operator", "eks", "none"]


@pytest.mark.parametrize(
    ("preset", "namespace", "labels"),
    [
        # aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent/templates/
        # dcgm-daemonset.yaml: the agent's host engine, which holds every GPU.
        ("eks", "kube-system", {"k8s-app": "dcgm-server", "version": "v1"}),
        # NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin (selectorLabels).
        (
            "eks",
            "kube-system",
            {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": "x"},
        ),
        # NVIDIA/gpu-operator assets: the operands' `app` labels.
        ("gpu-operator", "gpu-operator", {"app": "nvidia-device-plugin-daemonset"}),
        ("gpu-operator", "gpu-operator", {"app": "nvidia-dcgm"}),
    ],
)
def test_a_preset_selects_the_gpu_clients_as_their_charts_label_them(
    preset: str, namespace: str, labels: dict[str, str]
) -> None:
    """A preset whose selector misses a client waits for nothing and then fails the reset
    "In use by another client": each must select the pods as the real installs label them."""
    from remediation_emulator import selectors

    assert any(
        pods.namespace in ("", namespace) and selectors.parse_labels(pods.selector).matches(labels)
        for pods in clients.PRESETS[preset].pods
    ), f"{preset} does not select {namespace} {labels}"
