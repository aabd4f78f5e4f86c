"""Executor Jobs that run the node program run it, against a fake GPU node per node.

A Job whose first container's command is `remediation-operator node ...` (the chart's
templates) is not pretended: when the Job runner decides the Job's run is over, it starts the
same program as a process (`python -m remediation_operator node ...`), with the fake GPU
node's tools first on PATH (`gpunode/bin`), a host root of its own (a systemd host) and the
emulated Node's state copied into the fake node first: its bootID, and whether DCGM
diagnostics fail (the node agent's `validates`). The GPU clients are the fake node's
`holders`: they let go once the Node carries every label of the reset's preset (the fake
nvidia-smi reads the Node from the API server), so a reset that did not stop them fails busy
exactly as on a real node; a container not running as root (`runAsUser: 0`; the image's
user is 65532) gets nvidia-smi's "Insufficient Permissions". The program's exit code decides
the Job; its JSON result is the termination message of the run's ended pod (fleet/jobs.py),
where the operator reads it. Only then is the action's effect applied to the emulated node
(a reset, a reboot). The fleet's device-plugin pods follow the GPU Operator's node label as
its DaemonSet does (`place_device_plugin`), so the program's wait for the clients to go is a
real wait.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remediation_emulator.fleet import manifests, resources
from remediation_emulator.fleet.client import ApiError, Connection, KubeClient, Obj
from remediation_emulator.gpunode import state as fake

PROGRAM = (sys.executable, "-m", "remediation_operator")
GPU_OPERATOR_STOP = {
    f"nvidia.com/gpu.deploy.{c}": "false"
    for c in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
}
"""The gpu-operator preset's labels (remediation_operator.node.clients), as the GPU
Operator's DaemonSets honour them: with all of them on the Node, its clients let go."""
GPU_CLIENTS = (
    "nvidia-device-plugin",
    "gpu-feature-discovery",
    "nv-hostengine",
    "dcgm-exporter",
)
"""What holds every GPU of a fake node until the stop labels are all there: the GPU
Operator's device plugin, GPU feature discovery, DCGM host engine and dcgm-exporter (one per
label of `GPU_OPERATOR_STOP`); nvidia-smi(1) refuses `--gpu-reset` while any of them, monitoring
included, has the device open."""


def runs_program(job: Obj) -> bool:
    spec = job.get("spec", {}).get("template", {}).get("spec", {})
    containers = spec.get("containers") or []
    command = list(containers[0].get("command") or []) if containers else []
    return command[:2] == ["remediation-operator", "node"]


IMAGE_USER = 65532
"""The operator image's `USER` (Dockerfile): what runs unless the pod says otherwise."""


def runs_as_root(job: Obj) -> bool:
    """Whether the program's container runs as root: its `runAsUser`, else the pod's, else the
    image's user (65532). `privileged` does not change the user, and a non-root process keeps
    no effective capabilities across execve (capabilities(7)): nvidia-smi's reset then says
    "Insufficient Permissions" (exit 4), as on a real node."""
    spec = job.get("spec", {}).get("template", {}).get("spec", {})
    container = (spec.get("containers") or [{}])[0]
    for context in (container.get("securityContext"), spec.get("securityContext")):
        user = (context or {}).get("runAsUser")
        if user is not None:
            return int(user) == 0
    return IMAGE_USER == 0


@dataclass(frozen=True)
class Ran:
    code: int
    result: dict[str, Any]
    termination: str = ""

    @property
    def message(self) -> str:
        return str(self.result.get("message") or f"exit code {self.code}")

    @property
    def said(self) -> str:
        """The termination message: what the program wrote to its termination log."""
        return self.termination or json.dumps(self.result)[:4096]


@dataclass
class NodeProgram:
    connection: Connection
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fake-gpu-nodes-")))

    def _node_dir(self, node: str) -> Path:
        home = self.root / node
        if not home.exists():
            host = home / "host"
            (host / "etc").mkdir(parents=True)
            (host / "etc/os-release").write_text('ID="amzn"\n')
            (host / "run/systemd/system").mkdir(parents=True)
            fake.write(home / "state.json", fake.node(8, holders=list(GPU_CLIENTS)))
        return home

    def state(self, node: str) -> dict[str, Any]:
        return fake.read(self._node_dir(node) / "state.json")

    def _kubeconfig(self, home: Path) -> Path:
        path = home / "kubeconfig"
        token = self.connection.headers.get("Authorization", "").removeprefix("Bearer ")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fleet", "cluster": {"server": self.connection.server}}],
            "users": [{"name": "fleet", "user": {"token": token}}],
            "contexts": [{"name": "fleet", "context": {"cluster": "fleet", "user": "fleet"}}],
            "current-context": "fleet",
        }
        path.write_text(json.dumps(config))
        return path

    async def run(self, job: Obj, node: Obj, healthy: bool) -> Ran:
        name = node["metadata"]["name"]
        home = self._node_dir(name)
        path = home / "state.json"
        current = fake.read(path)
        current["boot_id"] = node.get("status", {}).get("nodeInfo", {}).get("bootID", "")
        current["diag_failure"] = None if healthy else {"gpu": 0, "test": "Memory"}
        current["root"] = runs_as_root(job)
        current["clients_api"] = {
            "server": self.connection.server,
            "authorization": self.connection.headers.get("Authorization", ""),
            "node": name,
            "stop_labels": GPU_OPERATOR_STOP,
        }
        fake.write(path, current)
        (home / "boot_id").write_text(current["boot_id"] + "\n")
        container = job["spec"]["template"]["spec"]["containers"][0]
        argv = [*container.get("command", [])[2:], *container.get("args", [])]
        argv = _rooted(argv, str(home / "host"))
        env = fake.environment(path)
        env["KUBECONFIG"] = str(self._kubeconfig(home))
        env["NODE_NAME"] = name
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = str(item["value"])
        if "reboot" in argv:
            argv += ["--boot-id-file", str(home / "boot_id"), "--state-dir", "/var/lib/ro"]
        if "validate" in argv:
            argv += ["--ready-timeout", "0"]
        process = await asyncio.create_subprocess_exec(
            *PROGRAM,
            "node",
            "--termination-log",
            str(home / "termination-log"),
            *argv,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        code = process.returncode or 0
        lines = out.decode().strip().splitlines()
        try:
            result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        except ValueError:
            result = {}
        if not result:
            result = {"message": (err.decode().strip().splitlines() or ["no output"])[-1]}
        log = home / "termination-log"
        written = log.read_text(encoding="utf-8") if log.exists() else ""
        log.unlink(missing_ok=True)
        return Ran(code, result, written)


def _rooted(argv: list[str], host: str) -> list[str]:
    """The program's arguments with `--host-root` pointed at the fake node's host root."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--host-root":
            skip = True
            continue
        if arg.startswith("--host-root="):
            continue
        out.append(arg)
    return ["--host-root", host, *out]


DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
DEVICE_PLUGIN_PREFIX = "device-plugin:"
"""Work-queue keys of the device-plugin placement are `device-plugin:<node>`."""


async def place_device_plugin(client: KubeClient, node: Obj) -> bool:
    """The GPU Operator's device-plugin DaemonSet, as its node affinity places it: no pod on a
    Node labelled `nvidia.com/gpu.deploy.device-plugin=false` (its pod there is deleted), one
    again once the label is gone (gpu-operator `controllers/object_controls.go`).

    Returns whether the node is left with its device plugin running (a pod present or
    created): False while the label keeps it off."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    pods = await client.list(
        resources.PODS,
        label_selector=f"app={manifests.DEVICE_PLUGIN}",
        field_selector=f"spec.nodeName={name}",
    )
    present = [p for p in pods.get("items") or [] if not p["metadata"].get("deletionTimestamp")]
    if labels.get(DEVICE_PLUGIN_LABEL) == "false":
        for pod in present:
            meta = pod["metadata"]
            try:
                await client.delete(
                    resources.PODS, meta["name"], namespace=meta["namespace"], uid=meta["uid"]
                )
            except ApiError as error:
                if error.status not in (404, 409):
                    raise
        return False
    if present:
        return True
    sets = await client.list(resources.DAEMONSETS)
    owner = next(
        (d for d in sets.get("items") or [] if d["metadata"]["name"] == manifests.DEVICE_PLUGIN),
        None,
    )
    if owner is None:
        return False
    shape = manifests.Shape(device_plugin_namespace=owner["metadata"]["namespace"])
    pod = manifests.device_plugin_pod(shape, owner, name)
    await client.create(resources.PODS, pod, namespace=shape.device_plugin_namespace)
    return True
