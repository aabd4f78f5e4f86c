"""`remediation-operator node reboot` against the fake node (issue 22): the expected-bootID
guard, no second request while the first may still reboot, the Bottlerocket path."""

from __future__ import annotations

from remediation_emulator.gpunode import state as fake
from tests.node_program.conftest import FakeNode

BOOT = fake.node()["boot_id"]


def boot(node: FakeNode, value: str) -> str:
    path = node.host_root.parent / "boot_id"
    path.write_text(value + "\n")
    return str(path)


def reboot(node: FakeNode, expected: str, actual: str = BOOT) -> tuple[int, dict[str, object]]:
    code, result, _ = node.run(
        "reboot", "--expected-boot-id", expected, "--boot-id-file", boot(node, actual)
    )
    return code, result


def test_a_systemd_host_is_rebooted_once_per_boot(node: FakeNode) -> None:
    code, result = reboot(node, BOOT)
    assert (code, result["reason"]) == (0, "RebootRequested")
    assert node.read()["reboots"] == 1
    assert ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "reboot"] in (
        node.read()["calls"]
    )
    # The pod runs again (at-least-once) before the node went down: no second request.
    code, result = reboot(node, BOOT)
    assert (code, result["reason"]) == (0, "RebootPending")
    assert node.read()["reboots"] == 1


def test_a_rerun_after_the_reboot_does_not_reboot_again(node: FakeNode) -> None:
    code, result = reboot(node, BOOT, actual="0b5c7d1e-new-boot")
    assert (code, result["reason"]) == (0, "AlreadyRebooted")
    assert node.read()["reboots"] == 0


def test_bottlerocket_reboots_through_its_api(node: FakeNode) -> None:
    node.host(os_id="bottlerocket", systemd=True)
    code, result = reboot(node, BOOT)
    assert (code, result["reason"]) == (0, "RebootRequested")
    assert result["platform"]["bottlerocket"] is True  # type: ignore[index]
    (call,) = [c for c in node.read()["calls"] if c[0] == "apiclient"]
    assert call[-1] == "reboot"
    assert not [c for c in node.read()["calls"] if c[0] == "nsenter"]


def test_a_host_with_no_known_reboot_path_is_a_permanent_failure(node: FakeNode) -> None:
    import shutil

    shutil.rmtree(node.host_root / "run")
    code, result = reboot(node, BOOT)
    assert (code, result["reason"]) == (2, "NoRebootPath")
    assert node.read()["reboots"] == 0


def test_without_an_expected_boot_id_nothing_is_rebooted(node: FakeNode) -> None:
    code, result = reboot(node, "")
    assert (code, result["reason"]) == (2, "NoExpectedBootId")
    assert node.read()["reboots"] == 0


def test_a_refused_request_may_be_asked_again(node: FakeNode) -> None:
    state = node.read()
    state["systemd"] = False  # nsenter finds no systemctl
    node.write(state)
    code, result = reboot(node, BOOT)
    assert (code, result["reason"]) == (1, "RebootRefused")
    state = node.read()
    state["systemd"] = True
    node.write(state)
    code, result = reboot(node, BOOT)
    assert (code, result["reason"]) == (0, "RebootRequested")
