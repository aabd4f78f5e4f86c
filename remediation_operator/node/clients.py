"""Stopping and restoring the GPU's other users on this node around a GPU reset.

nvidia-smi refuses a reset while anything holds the GPU, monitoring included, and a drain
leaves DaemonSets running: the device plugin, DCGM (the GPU Operator's `nvidia-dcgm`,
dcgm-exporter's embedded host engine, the EKS node monitoring agent's `dcgm-server`) and GPU
feature discovery. NVIDIA's GPU Operator stops its components on one node when the node is
labelled `nvidia.com/gpu.deploy.<component>=false` (its node labels, gpu-operator
`controllers/object_controls.go`), which NVIDIA NVSentinel's reset and Google's GKE
gpu-reset-tool rely on too: label, wait for the pods to go, reset, restore the labels.
Restoring the device plugin also clears the unhealthy mark it put on the GPUs.

Presets (docs/install.md): `gpu-operator` (those labels), `eks` (one label the device plugin's
and dcgm-server's DaemonSets are told to avoid by node affinity; the EKS AMI ships no per-node
switch) and `none`. Which labels and which pods are configurable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

GPU_OPERATOR_COMPONENTS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
EKS_STOP_LABEL = "remediation.gpuops.io/gpu-clients"


@dataclass(frozen=True)
class PodSet:
    """Pods that hold the GPUs: a namespace ("" any) and a label selector."""

    namespace: str
    selector: str


@dataclass(frozen=True)
class Preset:
    name: str
    labels: Mapping[str, str]
    """Set on the node to stop the clients; removed (or restored) afterwards."""
    pods: tuple[PodSet, ...]


PRESETS: Mapping[str, Preset] = {
    "gpu-operator": Preset(
        "gpu-operator",
        {f"nvidia.com/gpu.deploy.{c}": "false" for c in GPU_OPERATOR_COMPONENTS},
        (
            PodSet(
                "",
                "app in (nvidia-device-plugin-daemonset,gpu-feature-discovery,"
                "nvidia-dcgm-exporter,nvidia-dcgm)",
            ),
        ),
    ),
    "eks": Preset(
        "eks",
        {EKS_STOP_LABEL: "stopped"},
        (
            PodSet("kube-system", "app.kubernetes.io/name=nvidia-device-plugin"),
            # The agent's chart labels dcgm-server `k8s-app: dcgm-server`
            # (aws/eks-node-monitoring-agent charts/.../templates/dcgm-daemonset.yaml).
            PodSet("kube-system", "k8s-app=dcgm-server"),
        ),
    ),
    "none": Preset("none", {}, ()),
}


class NodeApi(Protocol):
    """What stopping the clients needs from the Kubernetes API (k8s adapter: node/kube.py)."""

    def labels(self, node: str) -> dict[str, str]: ...

    def set_labels(self, node: str, labels: Mapping[str, str | None]) -> None:
        """Merge-patch the node's labels (None removes one)."""

    def pods(self, node: str, pods: PodSet) -> list[str]:
        """`namespace/name` of the matching pods bound to `node` and not yet gone."""
        ...


class ClientsError(RuntimeError):
    """The clients did not stop in time; the message names the pods still there."""


@dataclass
class GpuClients:
    api: NodeApi
    node: str
    preset: Preset
    sleep: Callable[[float], None]
    monotonic: Callable[[], float]
    _saved: dict[str, str | None] | None = None

    def stop(self, timeout: float) -> list[str]:
        """Label the node and wait for the client pods to go; the labels it set."""
        if not self.preset.labels:
            return []
        current = self.api.labels(self.node)
        self._saved = {key: current.get(key) for key in self.preset.labels}
        self.api.set_labels(self.node, dict(self.preset.labels))
        end = self.monotonic() + timeout
        while True:
            left = self.remaining()
            if not left:
                return [f"{k}={v}" for k, v in self.preset.labels.items()]
            if self.monotonic() >= end:
                raise ClientsError(
                    f"GPU clients still running after {timeout:.0f}s: {', '.join(left[:5])}"
                )
            self.sleep(1.0)

    def remaining(self) -> list[str]:
        return sorted({p for pods in self.preset.pods for p in self.api.pods(self.node, pods)})

    def restore(self) -> list[str]:
        """Put the labels back as they were before `stop` (idempotent)."""
        if self._saved is None:
            return []
        self.api.set_labels(self.node, self._saved)
        restored = [f"{k}={v}" if v is not None else f"{k}-" for k, v in self._saved.items()]
        self._saved = None
        return restored


def preset(name: str, labels: Sequence[str] = (), pods: Sequence[str] = ()) -> Preset:
    """A preset by name, or `custom` from `key=value` labels and `namespace/selector` pods."""
    if name != "custom":
        if name not in PRESETS:
            raise ValueError(
                f"--clients: unknown preset {name!r} (one of {', '.join(PRESETS)}, custom)"
            )
        return PRESETS[name]
    parsed: dict[str, str] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--client-label: {item!r} is not key=value")
        parsed[key] = value
    sets = []
    for item in pods:
        namespace, sep, selector = item.partition("/")
        if not sep or not selector:
            raise ValueError(f"--client-pods: {item!r} is not namespace/selector")
        sets.append(PodSet(namespace, selector))
    return Preset("custom", parsed, tuple(sets))
