"""What a real GPU Node carries besides what the operator reads, so emulated Nodes weigh the same.

A p5.48xlarge Node on EKS with the NVIDIA GPU operator is about 6.6 KB of JSON: GPU
feature-discovery and node-feature-discovery labels (`nvidia.com/*`,
`feature.node.kubernetes.io/*`), the images the kubelet reports (each by digest and by tag,
with its size), the server's `managedFields` (one entry per writer and subresource) and a few
annotations. The operator reads almost none of it (labels aside), but a watcher of such Nodes
parses all of it and, unless it strips them, keeps it: memory measured on 1 KB emulated Nodes
understated a real fleet's about fivefold (docs/performance.md).

Everything here is a pure, deterministic function of the node's index, so a fleet of 10,000
Nodes is generated in well under a second and is the same on every run.
"""

from __future__ import annotations

import hashlib
from typing import Any

_IMAGES: tuple[tuple[str, str, int], ...] = (
    ("nvcr.io/nvidia/pytorch", "24.10-py3", 10_483_116_834),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.0", 142_301_122),
    ("nvcr.io/nvidia/driver", "550.127.05-amzn2023", 1_233_508_330),
    (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni",
        "v1.19.0-eksbuild.1",
        52_880_110,
    ),
    ("public.ecr.aws/eks-distro/kubernetes/pause", "3.10", 298_689),
)
"""What a GPU node's kubelet reports in status.images (the largest first, as it sorts them)."""

_GFD_LABELS: dict[str, str] = {
    "nvidia.com/cuda.driver-version.full": "550.127.05",
    "nvidia.com/cuda.runtime-version.full": "12.4",
    "nvidia.com/gfd.timestamp": "1733011200",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.deploy.driver": "pre-installed",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "p5.48xlarge",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/vgpu.present": "false",
    "feature.node.kubernetes.io/kernel-version.full": "6.1.119-129.201.amzn2023.x86_64",
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/system-os_release.ID": "amzn",
}
"""Labels GPU feature discovery and node feature discovery put on a p5.48xlarge."""


def _digest(index: int, image: str) -> str:
    return hashlib.sha256(f"{image}/{index // 64}".encode()).hexdigest()
    # (one digest per image and batch of 64 nodes: a fleet pulls the same few builds)


def labels(index: int) -> dict[str, str]:
    """GPU and node feature-discovery labels (besides the ones a selector uses)."""
    return dict(_GFD_LABELS, **{"topology.k8s.aws/network-node-layer-1": f"nn-{index % 97:04x}"})


def extra_annotations(index: int, ip: str) -> dict[str, str]:
    """What kubelet, the CSI driver and node feature discovery annotate a GPU Node with."""
    return {
        "alpha.kubernetes.io/provided-node-ip": ip,
        "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-{index:017x}"}}',
        "nfd.node.kubernetes.io/feature-labels": ",".join(
            k.removeprefix("feature.node.kubernetes.io/")
            for k in _GFD_LABELS
            if k.startswith("feature.node.kubernetes.io/")
        ),
    }


def images(index: int) -> list[dict[str, Any]]:
    """status.images: each image by digest and by tag, with its size."""
    return [
        {
            "names": [f"{image}@sha256:{_digest(index, image)}", f"{image}:{tag}"],
            "sizeBytes": size,
        }
        for image, tag, size in _IMAGES
    ]


_KUBELET_CONDITIONS = frozenset({"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"})


def _keys(*names: str) -> dict[str, Any]:
    return {f"f:{n}": {} for n in names}


def _conditions(types: tuple[str, ...]) -> dict[str, Any]:
    fields = _keys("lastHeartbeatTime", "lastTransitionTime", "message", "reason", "status")
    out: dict[str, Any] = {".": {}}
    for type_ in types:
        out[f'k:{{"type":"{type_}"}}'] = {".": {}, **fields, "f:type": {}}
    return out


def managed_fields(
    stamp: str, label_keys: list[str], condition_types: tuple[str, ...]
) -> list[dict[str, Any]]:
    """metadata.managedFields as a real server keeps them for a Karpenter-launched GPU node."""

    def entry(manager: str, subresource: str, fields: dict[str, Any]) -> dict[str, Any]:
        out = {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": stamp,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
        if subresource:
            out["subresource"] = subresource
        return out

    kubelet_conditions = tuple(t for t in condition_types if t in _KUBELET_CONDITIONS)
    return [
        entry(
            "kubelet",
            "",
            {
                "f:metadata": {
                    "f:annotations": {".": {}, **_keys("alpha.kubernetes.io/provided-node-ip")},
                    "f:labels": {".": {}, **_keys(*label_keys[:4])},
                },
                "f:spec": _keys("providerID"),
            },
        ),
        entry(
            "kubelet",
            "status",
            {
                "f:status": {
                    "f:conditions": _conditions(kubelet_conditions),
                    "f:images": {},
                    "f:nodeInfo": _keys("bootID"),
                }
            },
        ),
    ]


def enlarge(node: dict[str, Any], index: int) -> dict[str, Any]:
    """`node` with what a real GPU Node carries besides: feature-discovery labels, annotations,
    images and managedFields (the node's own labels and annotations win over these)."""
    metadata = dict(node.get("metadata") or {})
    status = dict(node.get("status") or {})
    ip = next(
        (a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
        f"10.{(index >> 16) & 0xFF | 0x10}.{(index >> 8) & 0xFF}.{index & 0xFF}",
    )
    metadata["labels"] = labels(index) | dict(metadata.get("labels") or {})
    metadata["annotations"] = extra_annotations(index, ip) | dict(metadata.get("annotations") or {})
    stamp = next(
        (
            c["lastTransitionTime"]
            for c in status.get("conditions") or []
            if "lastTransitionTime" in c
        ),
        "2026-01-01T00:00:00Z",
    )
    types = tuple(str(c.get("type")) for c in status.get("conditions") or [])
    metadata["managedFields"] = managed_fields(stamp, sorted(metadata["labels"]), types)
    status.setdefault("images", images(index))
    return dict(node, metadata=metadata, status=status)
