"""The objects a real GPU fleet on EKS with Karpenter shows, as pure functions of a `Shape`.

The operator selects nodes by GPU labels, finds NodeClaims by ownerReference or providerID,
skips DaemonSet pods when draining and respects PodDisruptionBudgets: for the emulated fleet
to exercise all of that, its objects carry the same labels, owners and fields that Karpenter,
the kubelet, GPU feature discovery and the Job controller put on real ones (p5.48xlarge: 8
H100 GPUs, 192 vCPUs, 2 TiB memory).
"""

from __future__ import annotations

import importlib.resources
import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from remediation_emulator.fleet import health, node_detail, resources
from remediation_emulator.fleet.client import Obj
from remediation_emulator.fleet.config import EMULATED_LABEL

NODECLAIM_FINALIZER = "karpenter.sh/termination"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"


class ShapeError(ValueError):
    """A fleet shape that cannot be built; the message names the field."""


@dataclass(frozen=True)
class Shape:
    """What the fleet looks like: how many nodes of which kind, where, running what."""

    nodes: int = 3
    node_prefix: str = "gpu"
    nodepool: str = "gpu-h100"
    region: str = "us-east-1"
    zones: tuple[str, ...] = ("us-east-1a", "us-east-1b", "us-east-1c")
    instance_type: str = "p5.48xlarge"
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpus_per_node: int = 8
    training_pods_per_node: int = 1
    nodes_per_training_job: int = 4
    pdb_every: int = 2
    """Every n-th training Job gets a PodDisruptionBudget (maxUnavailable: 1); 0: none."""
    device_plugin_namespace: str = "gpu-operator"
    training_namespace: str = "training"
    extra_namespaces: tuple[str, ...] = ("remediation-system",)
    node_finalizer: bool = True
    """Nodes carry `karpenter.sh/termination` as Karpenter's do: deleting one waits for the
    emulated Karpenter to drain it. Turn off for a fleet run without Karpenter."""

    def __post_init__(self) -> None:
        if self.nodes < 0:
            raise ShapeError(f"fleet shape nodes: must not be negative, got {self.nodes}")
        if not self.zones:
            raise ShapeError("fleet shape zones: at least one zone is needed")
        for name in ("gpus_per_node", "nodes_per_training_job"):
            if getattr(self, name) < 1:
                raise ShapeError(f"fleet shape {name}: must be at least 1")
        for name in ("training_pods_per_node", "pdb_every"):
            if getattr(self, name) < 0:
                raise ShapeError(f"fleet shape {name}: must not be negative")

    def node_name(self, index: int) -> str:
        return f"{self.node_prefix}-{index:04d}"

    def zone(self, index: int) -> str:
        return self.zones[index % len(self.zones)]


def new_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def instance_id(rng: random.Random) -> str:
    return "i-0" + "".join(rng.choice("0123456789abcdef") for _ in range(16))


def provider_id(zone: str, instance: str) -> str:
    return f"aws:///{zone}/{instance}"


def internal_ip(index: int) -> str:
    return f"10.{(index >> 16) & 0xFF | 0x10}.{(index >> 8) & 0xFF}.{index & 0xFF}"


def _capacity(shape: Shape) -> tuple[dict[str, str], dict[str, str]]:
    capacity = {
        "cpu": "192",
        "memory": "2097152000Ki",
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "nvidia.com/gpu": str(shape.gpus_per_node),
        "vpc.amazonaws.com/efa": "32",
        "pods": "110",
    }
    allocatable = dict(capacity, cpu="191450m", memory="2061410304Ki")
    allocatable["ephemeral-storage"] = "95551679124"
    return capacity, allocatable


def _labels(shape: Shape, name: str, zone: str) -> dict[str, str]:
    return {
        EMULATED_LABEL: "true",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        HOSTNAME_LABEL: name,
        "node.kubernetes.io/instance-type": shape.instance_type,
        "beta.kubernetes.io/instance-type": shape.instance_type,
        ZONE_LABEL: zone,
        "topology.kubernetes.io/region": shape.region,
        NODEPOOL_LABEL: shape.nodepool,
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.sh/initialized": "true",
        "karpenter.sh/registered": "true",
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "karpenter.k8s.aws/instance-gpu-count": str(shape.gpus_per_node),
        "karpenter.k8s.aws/instance-gpu-name": "h100",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(shape.gpus_per_node),
        "nvidia.com/gpu.product": shape.gpu_product,
        "nvidia.com/gpu.memory": "81559",
    }


def nodeclaim(shape: Shape, zone: str) -> Obj:
    """A NodeClaim as Karpenter creates it, named `<nodepool>-<suffix>` by the server (status
    comes later, through the status subresource)."""
    labels = {
        EMULATED_LABEL: "true",
        NODEPOOL_LABEL: shape.nodepool,
        "node.kubernetes.io/instance-type": shape.instance_type,
        ZONE_LABEL: zone,
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    }
    return {
        "apiVersion": resources.NODECLAIMS.api_version,
        "kind": "NodeClaim",
        "metadata": {
            "generateName": f"{shape.nodepool}-",
            "labels": labels,
            "finalizers": [NODECLAIM_FINALIZER],
        },
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass",
                "name": "default",
            },
            "requirements": [
                {"key": NODEPOOL_LABEL, "operator": "In", "values": [shape.nodepool]},
                {
                    "key": "node.kubernetes.io/instance-type",
                    "operator": "In",
                    "values": [shape.instance_type],
                },
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": ZONE_LABEL, "operator": "In", "values": [zone]},
            ],
            "resources": {"requests": {"nvidia.com/gpu": str(shape.gpus_per_node)}},
            "expireAfter": "720h",
        },
    }


def nodeclaim_status(shape: Shape, node_name: str, provider: str, now: datetime) -> Obj:
    capacity, allocatable = _capacity(shape)
    since = health.timestamp(now)
    conditions = [
        {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": since}
        for t in ("Launched", "Registered", "Initialized", "Ready")
    ]
    return {
        "status": {
            "providerID": provider,
            "nodeName": node_name,
            "imageID": "ami-0f5b9d6a1c2e3f4a5",
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
        }
    }


def owner(obj: Obj, *, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to `obj` (as controllers set them: controller + blockOwnerDeletion)."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def node(
    shape: Shape,
    *,
    index: int,
    zone: str,
    claim: Obj,
    provider: str,
    boot_id: str,
    now: datetime,
) -> Obj:
    """A Node as the kubelet registers it and Karpenter adopts it (owned by its NodeClaim)."""
    name = shape.node_name(index)
    capacity, allocatable = _capacity(shape)
    pressure = [
        {
            "type": t,
            "status": "False",
            "reason": f"KubeletHasSufficient{r}",
            "message": f"kubelet has sufficient {r.lower()} available",
            "lastHeartbeatTime": health.timestamp(now),
            "lastTransitionTime": health.timestamp(now),
        }
        for t, r in (("MemoryPressure", "Memory"), ("DiskPressure", "Disk"), ("PIDPressure", "PID"))
    ]
    ip = internal_ip(index)
    metadata: dict[str, Any] = {
        "name": name,
        "labels": _labels(shape, name, zone),
        "annotations": {
            "karpenter.sh/nodepool-hash": "6821555240594823858",
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        },
        "ownerReferences": [owner(claim, controller=False)],
    }
    if shape.node_finalizer:
        metadata["finalizers"] = [NODECLAIM_FINALIZER]
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": {"providerID": provider},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": pressure + health.conditions(health.NodeHealth(boot_id), now),
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": f"ip-{ip.replace('.', '-')}.ec2.internal"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uuid.UUID(boot_id).hex,
                "systemUUID": f"ec2{uuid.UUID(boot_id).hex[3:]}",
                "bootID": boot_id,
                "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.6.20241212",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.32.0-eks-aeac579",
                "kubeProxyVersion": "v1.32.0-eks-aeac579",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    return node_detail.enlarge(body, index)  # real size: images, managedFields, GFD labels


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"


def device_plugin_daemonset(shape: Shape) -> Obj:
    labels = {"app": DEVICE_PLUGIN}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DEVICE_PLUGIN, "namespace": shape.device_plugin_namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "nvidia-device-plugin",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                        }
                    ],
                },
            },
        },
    }


def device_plugin_pod(shape: Shape, daemonset: Obj, node_name: str) -> Obj:
    """The DaemonSet's pod on one node: controller-owned, tolerates everything, node-critical."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{DEVICE_PLUGIN}-",
            "namespace": shape.device_plugin_namespace,
            "labels": {"app": DEVICE_PLUGIN, "pod-template-generation": "1"},
            "ownerReferences": [owner(daemonset)],
        },
        "spec": {
            "nodeName": node_name,
            "priorityClassName": "system-node-critical",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"operator": "Exists"},
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                },
            ],
            "containers": [
                {
                    "name": "nvidia-device-plugin",
                    "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                }
            ],
        },
    }


def training_job(shape: Shape, name: str, nodes: int) -> Obj:
    """A multi-node training Job (one pod per node). The fleet's kubelet leaves it alone: it
    is not pinned to a node, so it only owns the training pods the builder places."""
    gpus = str(shape.gpus_per_node)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": shape.training_namespace, "labels": {"app": name}},
        "spec": {
            "parallelism": nodes,
            "completions": nodes,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                            "resources": {
                                "requests": {"nvidia.com/gpu": gpus},
                                "limits": {"nvidia.com/gpu": gpus},
                            },
                        }
                    ],
                },
            },
        },
    }


def training_pod(shape: Shape, job: Obj, index: int, node_name: str) -> Obj:
    """One pod of a training Job, bound to a node, labelled as the Job controller labels it."""
    name = job["metadata"]["name"]
    uid = job["metadata"]["uid"]
    gpus = str(shape.gpus_per_node // max(1, shape.training_pods_per_node))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-{index}-",
            "namespace": shape.training_namespace,
            "labels": {
                "app": name,
                "batch.kubernetes.io/job-name": name,
                "job-name": name,
                "batch.kubernetes.io/controller-uid": uid,
                "controller-uid": uid,
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [owner(job)],
        },
        "spec": {
            "nodeName": node_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                    "resources": {
                        "requests": {"nvidia.com/gpu": gpus},
                        "limits": {"nvidia.com/gpu": gpus},
                    },
                }
            ],
        },
    }


def pdb(shape: Shape, job_name: str) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": job_name, "namespace": shape.training_namespace},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": {"batch.kubernetes.io/job-name": job_name}},
        },
    }


def nodeclaim_crd() -> Obj:
    """Karpenter's NodeClaim CRD (the fixture shipped as `nodeclaim-crd.yaml`)."""
    text = importlib.resources.files(__package__).joinpath("nodeclaim-crd.yaml").read_text()
    crd: Obj = yaml.safe_load(text)
    return crd
