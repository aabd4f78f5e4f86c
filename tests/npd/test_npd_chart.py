"""The chart's node-problem-detector option, rendered by the real `helm template`.

Off by default (nothing of it renders); on, it ships exactly the rules tests/npd checks with
RE2, runs NPD on the GPU nodes whatever their taints, heart-beats inside the default policy's
`staleAfter`, and its pods match none of the operator's selectors.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.chart import chart_check

NPD_VALUES = chart_check.CHART / "ci" / "npd-values.yaml"
NPD_FILES = chart_check.CHART / "npd"
Document = dict[str, Any]


@pytest.fixture(scope="module")
def tools() -> chart_check.Tools:
    try:
        return chart_check.Tools.find()
    except chart_check.ToolMissingError as missing:
        pytest.skip(f"chart tools missing, run `make chart-check` to install them: {missing}")


def of_kind(docs: list[Document], kind: str) -> list[Document]:
    return chart_check.objects(docs, kind)


def npd_objects(docs: list[Document]) -> list[Document]:
    return [
        d
        for d in docs
        if d.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component")
        == "node-problem-detector"
    ]


def test_nothing_of_npd_renders_by_default(tools: chart_check.Tools) -> None:
    assert npd_objects(chart_check.render(tools, None)) == []


def test_npd_ships_the_tested_rules_and_runs_on_every_gpu_node(tools: chart_check.Tools) -> None:
    docs = chart_check.render(tools, NPD_VALUES)
    kinds = sorted(d["kind"] for d in npd_objects(docs))
    assert kinds == ["ClusterRoleBinding", "ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"]
    (config,) = [c for c in of_kind(docs, "ConfigMap") if c in npd_objects(docs)]
    for name in ("gpu-kernel-monitor.json", "dcgm-health-monitor.json", "check-dcgm-health.sh"):
        shipped = (NPD_FILES / name).read_text(encoding="utf-8")
        assert config["data"][name].strip() == shipped.strip(), name
    json.loads(config["data"]["gpu-kernel-monitor.json"])  # still valid JSON once rendered
    (daemonset,) = of_kind(docs, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert "--config.system-log-monitor=/config/gpu-kernel-monitor.json" in command
    assert "--config.custom-plugin-monitor=/config/dcgm-health-monitor.json" in command
    # Heartbeats every minute: well inside the default policy's staleAfter (5m) on GPUProblem.
    assert "--k8s-exporter-heartbeat-period=1m" in command
    assert pod["tolerations"] == [{"operator": "Exists"}]  # keeps reporting on quarantined nodes
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (binding,) = [b for b in of_kind(docs, "ClusterRoleBinding") if b in npd_objects(docs)]
    assert binding["roleRef"]["name"] == "system:node-problem-detector"
    script = next(
        i for v in pod["volumes"] if "configMap" in v for i in v["configMap"]["items"]
        if i["key"] == "check-dcgm-health.sh"
    )  # fmt: skip
    assert script["mode"] == 0o755


def test_no_operator_selector_picks_up_npd_pods(tools: chart_check.Tools) -> None:
    docs = chart_check.render(tools, NPD_VALUES)
    (daemonset,) = of_kind(docs, "DaemonSet")
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    selectors = [d["spec"]["selector"]["matchLabels"] for d in of_kind(docs, "Deployment")]
    selectors += [d["spec"]["selector"] for d in of_kind(docs, "Service")]
    selectors += [
        d["spec"]["selector"]["matchLabels"] for d in of_kind(docs, "PodDisruptionBudget")
    ]
    assert selectors
    for selector in selectors:
        assert not selector.items() <= labels.items(), selector


def test_the_dcgm_check_is_off_unless_asked(tools: chart_check.Tools) -> None:
    docs = chart_check.render(tools, None, ("nodeProblemDetector.enabled=true",))
    (daemonset,) = of_kind(docs, "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert not any("custom-plugin-monitor" in arg for arg in container["command"])
    assert container["image"].startswith("registry.k8s.io/node-problem-detector/")
