"""What a user gets from `helm install`: the rendered objects, asserted field by field."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest
import yaml

from tests.chart import chart_check

Document = dict[str, Any]
VALUE_SETS = ("default", "monitoring-policy-values", "nodeagent-single-values")

# The RBAC the operator needs, as tests/rbac/ proved it from the request log of every
# integration scenario (narrower than the first runtime contract: no namespaces, no
# events.k8s.io, no patch/update of Remediations or policies, only status updates, no
# nodeclaims watch, no Job delete). Leases, and creating and reading executor Jobs, are granted
# only in the operator's namespace; Jobs are created, listed and watched only in the executor
# namespace (kopf runs namespaced to it, so it lists and watches Namespaces); everything else
# is cluster-wide.
CLUSTER_RULES = frozenset(
    {("", "nodes", v) for v in ("get", "list", "watch", "patch", "delete")}
    | {("", "pods", v) for v in ("list", "watch", "delete")}
    | {("", "pods/eviction", "create")}
    | {("", "events", v) for v in ("create", "patch")}
    | {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")}
    | {("remediation.gpuops.io", "remediationpolicies", v) for v in ("get", "list", "watch")}
    | {("remediation.gpuops.io", "remediationpolicies/status", "update")}
    | {
        ("remediation.gpuops.io", "remediations", v)
        for v in ("get", "list", "watch", "create", "delete")
    }
    | {("remediation.gpuops.io", "remediations/status", "update")}
    | {("karpenter.sh", "nodeclaims", v) for v in ("get", "list", "delete")}
    | {("", "namespaces", v) for v in ("list", "watch")}
)
LEASE_RULES = frozenset({("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")})
EXECUTOR_RULES = frozenset(
    {("batch", "jobs", v) for v in ("get", "list", "watch", "create", "delete")}
    | {("", "events", "list")}
)

CONTRACT_METRICS = frozenset(
    {
        "gpuops_remediation_incidents",
        "gpuops_remediation_steps_started_total",
        "gpuops_remediation_steps_finished_total",
        "gpuops_remediation_step_duration_seconds",
        "gpuops_remediation_decisions_total",
        "gpuops_remediation_blocked",
        "gpuops_remediation_budget_headroom",
        "gpuops_remediation_circuit_open",
        "gpuops_remediation_nodes_quarantined",
        "gpuops_remediation_reaction_seconds",
        "gpuops_remediation_leader",
        "gpuops_remediation_policy_accepted",
        "gpuops_remediation_reconcile_errors_total",
        "gpuops_remediation_reconcile_duration_seconds",
        "gpuops_remediation_api_requests_total",
        "gpuops_remediation_queue_depth",
    }
)


def one(docs: list[Document], kind: str) -> Document:
    found = chart_check.objects(docs, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def operator_container(docs: list[Document]) -> Document:
    containers = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    result: Document = containers[0]
    return result


def flags(docs: list[Document]) -> dict[str, str]:
    args = operator_container(docs)["args"]
    return dict(arg.removeprefix("--").split("=", 1) for arg in args)


@pytest.mark.parametrize("values", VALUE_SETS)
def test_operator_runs_locked_down(rendered: dict[str, list[Document]], values: str) -> None:
    pod = one(rendered[values], "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostPID")
    assert not pod.get("hostNetwork")
    security = operator_container(rendered[values])["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("values", VALUE_SETS)
def test_probes_hit_the_health_endpoints_on_the_metrics_port(
    rendered: dict[str, list[Document]], values: str
) -> None:
    container = operator_container(rendered[values])
    port = next(p for p in container["ports"] if p["name"] == "metrics")["containerPort"]
    assert flags(rendered[values])["metrics-address"] == f"0.0.0.0:{port}"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    service = one(rendered[values], "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_default_install_is_two_replicas_with_leader_election(
    rendered: dict[str, list[Document]],
) -> None:
    docs = rendered["default"]
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    assert flags(docs) == {
        "metrics-address": "0.0.0.0:8080",
        "namespace": chart_check.NAMESPACE,
        "executor-namespace": f"{chart_check.NAMESPACE}-executors",
        "lease-name": "remediation-operator",
        "lease-duration": "15s",
        "renew-deadline": "10s",
        "retry-period": "2s",
        "retention": "720h",
        "job-retention": "1h",
        "watch-quiet-limit": "10m",
        "log-format": "json",
        "log-level": "info",
        "job-templates": "/etc/remediation-operator/job-templates",
    }
    env = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in operator_container(docs)["env"]
    }
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


def test_values_reach_the_flags_and_the_image(rendered: dict[str, list[Document]]) -> None:
    docs = rendered["nodeagent-single-values"]
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert flags(docs) == {
        "metrics-address": "0.0.0.0:8080",
        "namespace": chart_check.NAMESPACE,
        "executor-namespace": f"{chart_check.NAMESPACE}-executors",
        "lease-name": "gpu-remediation",
        "lease-duration": "30s",
        "renew-deadline": "20s",
        "retry-period": "4s",
        "retention": "336h",
        "job-retention": "1h",
        "watch-quiet-limit": "10m",
        "log-format": "console",
        "log-level": "debug",
    }
    assert operator_container(docs)["image"] == (
        "registry.example.com/platform/remediation-operator:0.1.0-rc.1@sha256:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpu-remediation"
    assert chart_check.objects(docs, "ServiceAccount") == []
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]


def test_default_image_is_the_app_version(rendered: dict[str, list[Document]]) -> None:
    image = operator_container(rendered["default"])["image"]
    version = tomllib.loads((chart_check.ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert image == f"ghcr.io/gpuops/remediation-operator:{version}"


def test_replicas_spread_over_hosts_and_zones(rendered: dict[str, list[Document]]) -> None:
    docs = rendered["default"]
    pod_template = one(docs, "Deployment")["spec"]["template"]
    own_labels = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert own_labels.items() <= pod_template["metadata"]["labels"].items()
    pod = pod_template["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": own_labels}
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["labelSelector"] == {"matchLabels": own_labels}
    # The operator must not run on (and drain) the GPU nodes it remediates.
    (gpu_term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert gpu_term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}
    ]


def test_scheduling_values_are_applied(rendered: dict[str, list[Document]]) -> None:
    pod = one(rendered["nodeagent-single-values"], "Deployment")["spec"]["template"]["spec"]
    assert "affinity" not in pod
    assert "topologySpreadConstraints" not in pod
    assert pod["nodeSelector"] == {
        "kubernetes.io/os": "linux",
        "eks.amazonaws.com/nodegroup": "system",
    }
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    pod = one(rendered["monitoring-policy-values"], "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rbac_is_exactly_the_contract(rendered: dict[str, list[Document]], values: str) -> None:
    docs = rendered[values]
    operator = one(docs, "Deployment")["metadata"]["namespace"]
    executors = flags(docs)["executor-namespace"]
    assert executors == f"{operator}-executors"
    assert chart_check.rbac(docs) == {
        "cluster": CLUSTER_RULES,
        operator: LEASE_RULES,
        executors: EXECUTOR_RULES,
    }
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(bindings) == 3
    for binding in bindings:
        (subject,) = binding["subjects"]
        assert subject["name"] == pod["serviceAccountName"]
        assert subject["namespace"] == operator
        role = binding["roleRef"]
        (target,) = [
            d for d in docs if d["kind"] == role["kind"] and d["metadata"]["name"] == role["name"]
        ]
        assert target["metadata"].get("namespace") == binding["metadata"].get("namespace")


def test_executor_jobs_get_a_privileged_namespace_of_their_own(
    rendered: dict[str, list[Document]],
) -> None:
    docs = rendered["default"]
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "remediation-system-executors"
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert flags(docs)["namespace"] == "remediation-system"


@pytest.mark.parametrize("values", VALUE_SETS)
def test_no_wildcard_and_no_node_status_write(
    rendered: dict[str, list[Document]], values: str
) -> None:
    roles = [d for d in rendered[values] if d["kind"] in ("ClusterRole", "Role")]
    assert len(roles) >= 2
    for role in roles:
        kind = role["kind"]
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{kind} grants * in {field}: {rule}"
            assert "nodes/status" not in rule["resources"]
            assert not rule.get("resourceNames")
            assert not rule.get("nonResourceURLs")


@pytest.mark.parametrize("values", VALUE_SETS)
def test_only_executor_jobs_are_privileged(
    rendered: dict[str, list[Document]], values: str
) -> None:
    jobs = chart_check.job_templates(rendered[values])
    text = json.dumps([d for d in rendered[values] if d.get("kind") != "ConfigMap"])
    assert '"privileged": true' not in text
    for name, job in jobs.items():
        (container,) = job["spec"]["template"]["spec"]["containers"]
        # As root: the image's user is 65532, privileged alone keeps it, and a non-root
        # nvidia-smi reset, nsenter or write under /host is refused (capabilities(7), D69).
        assert container["securityContext"] == {"runAsUser": 0, "privileged": True}, name


OPERATOR_IMAGE = "ghcr.io/gpuops/remediation-operator:" + str(
    tomllib.loads((chart_check.ROOT / "pyproject.toml").read_text())["project"]["version"]
)
"""The operator's own image at this release (the chart's appVersion is the package version)."""


def node_program(job: Document) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod and container of a Job that runs the node program on the host root (D55)."""
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == OPERATOR_IMAGE, "the operator's own image"
    assert container["command"][:4] == ["remediation-operator", "node", "--host-root", "/host"]
    assert container["terminationMessagePolicy"] == "File"
    assert {"name": "host", "hostPath": {"path": "/", "type": "Directory"}} in pod["volumes"]
    assert {"name": "host", "mountPath": "/host"} in [
        {k: v for k, v in m.items() if k != "readOnly"} for m in container["volumeMounts"]
    ]
    return pod, container


def test_gpu_reset_job_runs_the_node_program(rendered: dict[str, list[Document]]) -> None:
    jobs = chart_check.job_templates(rendered["default"])
    assert set(jobs) == {"gpu-reset.yaml", "reboot.yaml", "validate.yaml", "diagnose.yaml"}
    job = jobs["gpu-reset.yaml"]
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    assert job["spec"]["backoffLimit"] == 0
    pod, container = node_program(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False, "clients: none needs no API access"
    assert "runtimeClassName" not in pod, "nvidia-smi is the host's, through /host"
    assert container["command"][-1] == "reset"
    assert container["args"] == ["--clients=none", "--clients-timeout=300"]
    (name,) = container["env"]
    assert name == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def test_stopping_gpu_clients_gets_the_reset_an_identity_for_its_node(
    tools: chart_check.Tools,
) -> None:
    docs = chart_check.render(tools, overrides=["jobTemplates.gpuReset.clients=gpu-operator"])
    pod, container = node_program(chart_check.job_templates(docs)["gpu-reset.yaml"])
    assert container["args"][0] == "--clients=gpu-operator"
    assert pod["serviceAccountName"] == "remediation-operator-node-program"
    assert pod["automountServiceAccountToken"] is True
    (role,) = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-node-program")
    ]
    assert chart_check.granted(role) == {
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
    }
    (binding,) = [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("-node-program")
    ]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_reboot_job_runs_the_node_program_in_the_hosts_pid_namespace(
    rendered: dict[str, list[Document]],
) -> None:
    job = chart_check.job_templates(rendered["default"])["reboot.yaml"]
    pod, container = node_program(job)
    assert pod["hostPID"] is True
    assert container["command"][-1] == "reboot"


def test_job_templates_are_mounted_where_the_flag_points(
    rendered: dict[str, list[Document]],
) -> None:
    docs = rendered["default"]
    config_map = next(
        d
        for d in chart_check.objects(docs, "ConfigMap")
        if d["metadata"]["name"].endswith("-job-templates")
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "job-templates")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    mount = next(
        m for m in operator_container(docs)["volumeMounts"] if m["name"] == "job-templates"
    )
    assert mount["mountPath"] == flags(docs)["job-templates"]
    assert mount["readOnly"] is True
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/job-templates"])


def test_node_agent_install_ships_no_job_templates(rendered: dict[str, list[Document]]) -> None:
    docs = rendered["nodeagent-single-values"]
    assert chart_check.job_templates(docs) == {}
    assert "job-templates" not in flags(docs)
    policy = one(docs, "RemediationPolicy")
    assert policy["spec"]["actions"] == {
        "gpuReset": {"executor": "NodeAgent"},
        "reboot": {"executor": "NodeAgent"},
        "replace": {"provider": "Manual"},
    }


def test_optional_objects_are_off_by_default(rendered: dict[str, list[Document]]) -> None:
    kinds = {d["kind"] for d in rendered["default"]}
    assert kinds == {
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        "Namespace",  # the executors'
    }


def test_everything_optional_renders_coherently(rendered: dict[str, list[Document]]) -> None:
    docs = rendered["monitoring-policy-values"]
    namespaces = {
        d["metadata"]["name"]: d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for d in docs
        if d["kind"] == "Namespace"
    }
    # The operator's own namespace is restricted; only the executors' allows privileged pods.
    assert namespaces == {
        "gpu-remediation": "restricted",
        "gpu-remediation-executors": "privileged",
    }
    for doc in docs:
        if doc["kind"] in {"Namespace", "ClusterRole", "ClusterRoleBinding", "RemediationPolicy"}:
            assert "namespace" not in doc["metadata"]
        elif doc["metadata"]["name"].endswith("-dashboard"):
            assert doc["metadata"]["namespace"] == "monitoring"
        elif doc["metadata"]["name"].endswith("-executor"):
            assert doc["metadata"]["namespace"] == "gpu-remediation-executors", doc["kind"]
        else:
            assert doc["metadata"]["namespace"] == "gpu-remediation", doc["kind"]
    assert flags(docs)["namespace"] == "gpu-remediation"
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == selector
    assert one(docs, "Service")["metadata"]["labels"].items() >= selector.items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-remediation"]}
    budget = one(docs, "PodDisruptionBudget")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}


def test_default_policy_follows_the_values(rendered: dict[str, list[Document]]) -> None:
    policy = one(rendered["monitoring-policy-values"], "RemediationPolicy")
    assert policy["metadata"]["name"] == "gpu-fleet"
    spec = policy["spec"]
    assert spec["mode"] == "Enforce"
    assert spec["requireApproval"] == ["Replace"]
    assert [f["name"] for f in spec["faults"]] == [
        "gpu-contact-support",
        "gpu-unreachable",
        "gpu-fabric-manager",
        "gpu-recovery-reboot",
        "gpu-double-bit-ecc",
        "gpu-nvlink",
        "gpu-xid-reset",
        "gpu-dcgm-replace",
        "gpu-dcgm-reboot",
        "gpu-dcgm-health",
        "node-networking",
        "node-kernel",
        "node-storage",
        "host-unreachable",
        "gpu-unknown-reason",
    ]
    reset = next(f for f in spec["faults"] if f["name"] == "gpu-xid-reset")
    assert [s["action"] for s in reset["ladder"]] == [
        "Cordon",
        "Drain",
        "GPUReset",
        "Reboot",
        "Replace",
    ]


def test_rendered_policies_pass_the_operators_own_validation(
    rendered: dict[str, list[Document]],
) -> None:
    from remediation_operator.api import policy_parsing

    policies = [
        doc for docs in rendered.values() for doc in chart_check.objects(docs, "RemediationPolicy")
    ]
    assert len(policies) == 2
    for policy in policies:
        assert policy_parsing.validate(policy) == []


def test_grafana_dashboard_graphs_the_contract_metrics(rendered: dict[str, list[Document]]) -> None:
    config_map = next(
        d
        for d in chart_check.objects(rendered["monitoring-policy-values"], "ConfigMap")
        if d["metadata"]["name"].endswith("-dashboard")
    )
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    dashboard = json.loads(config_map["data"]["remediation-operator.json"])
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for expr in exprs
        for name in re.findall(r"gpuops_remediation_[a-z_]+", expr)
    }
    assert used == CONTRACT_METRICS
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(
        t["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"] for t in p["targets"]
    )


def test_executor_images_can_come_from_a_mirror_pinned_by_digest(
    rendered: dict[str, list[Document]],
) -> None:
    jobs = chart_check.job_templates(rendered["monitoring-policy-values"])
    images = {
        name: job["spec"]["template"]["spec"]["containers"][0]["image"]
        for name, job in jobs.items()
    }
    operator = operator_container(rendered["monitoring-policy-values"])["image"]
    assert images == {
        "gpu-reset.yaml": operator,
        "reboot.yaml": operator,
        "validate.yaml": operator,
        "diagnose.yaml": operator,
    }
    reset_pod = jobs["gpu-reset.yaml"]["spec"]["template"]["spec"]
    assert "runtimeClassName" not in reset_pod
    assert all(job["spec"]["ttlSecondsAfterFinished"] == 3600 for job in jobs.values())


@pytest.mark.parametrize("values", VALUE_SETS)
def test_the_operator_accepts_the_rendered_flags(
    rendered: dict[str, list[Document]], values: str
) -> None:
    import argparse

    from remediation_operator.commands import run

    parser = argparse.ArgumentParser(prog="remediation-operator run")
    run.add_arguments(parser)
    # The image's ENTRYPOINT is `remediation-operator run`; the container passes only flags.
    args, unknown = parser.parse_known_args(operator_container(rendered[values])["args"])
    assert unknown == []
    assert args.namespace == one(rendered[values], "Deployment")["metadata"]["namespace"]


def test_day_two_defaults_pdb_priority_and_revision_history(
    rendered: dict[str, list[Document]],
) -> None:
    docs = rendered["default"]
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["revisionHistoryLimit"] == 3
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == (
        "system-cluster-critical"
    )
    budget = one(docs, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_people_get_view_edit_and_approver_roles_the_operator_is_not_bound_to(
    rendered: dict[str, list[Document]],
) -> None:
    docs = rendered["default"]
    roles = {
        d["metadata"]["name"].removeprefix("remediation-operator-"): d
        for d in docs
        if d["kind"] == "ClusterRole"
    }
    assert set(roles) == {"remediation-operator", "view", "edit", "approver"}
    labels = roles["view"]["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert not [k for k in roles["edit"]["metadata"]["labels"] if "aggregate-to" in k], (
        "writing policies must not reach the built-in edit/admin roles by default"
    )
    assert chart_check.granted(roles["view"]) == {
        ("remediation.gpuops.io", r, v)
        for r in ("remediations", "remediationpolicies")
        for v in ("get", "list", "watch")
    }
    approver = chart_check.granted(roles["approver"])
    assert ("remediation.gpuops.io", "remediations", "patch") in approver
    assert ("remediation.gpuops.io", "remediationpolicies", "patch") not in approver
    bound = {d["roleRef"]["name"] for d in docs if d["kind"].endswith("Binding")}
    assert bound == {"remediation-operator", "remediation-operator-executor"}


def test_validation_job_runs_dcgm_diagnostics_at_the_policys_level(
    rendered: dict[str, list[Document]],
) -> None:
    """The shipped validation (spec.validation without a jobTemplate): the node program's
    `validate` (nvidia-smi checks, then `dcgmi diag -r $REMEDIATION_DIAG_LEVEL` against the
    node's host engine on the host network, D37, D55)."""
    job = chart_check.job_templates(rendered["default"])["validate.yaml"]
    assert job["spec"]["backoffLimit"] == 0
    pod, container = node_program(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["hostNetwork"] is True
    assert container["command"][-1] == "validate"
    assert container["args"] == ["--hostengine=localhost:5555", "--ready-timeout=600"]


def test_diagnostics_job_runs_the_node_program_against_the_nodes_host_engine(
    rendered: dict[str, list[Document]],
) -> None:
    """The shipped diagnostics before Reboot/Replace (spec.diagnostics without a jobTemplate):
    the node program's `collect` from the operator's image, as root, with the host's PID
    namespace (kernel log) and network (the node's own DCGM host engine: no second
    nv-hostengine, no DCGM image, no RuntimeClass), D69."""
    job = chart_check.job_templates(rendered["default"])["diagnose.yaml"]
    assert job["spec"]["backoffLimit"] == 0
    pod, container = node_program(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["hostPID"] is True
    assert pod["hostNetwork"] is True
    assert "runtimeClassName" not in pod
    assert container["command"][-1] == "collect"
    assert container["args"] == ["--hostengine=localhost:5555"]
    assert "nv-hostengine" not in yaml.safe_dump(job), "never a second host engine"
    assert {"name": "host", "mountPath": "/host"} in container["volumeMounts"], "writes there"


def test_aggregating_policy_writes_into_edit_and_admin_is_opt_in(
    tools: chart_check.Tools,
) -> None:
    docs = chart_check.render(tools, overrides=("rbac.aggregateToEdit=true",))
    [edit] = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "remediation-operator-edit"
    ]
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in labels


def _approver_policy(docs: list[Document]) -> tuple[Document, Document]:
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    [binding] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    return policy, binding


def test_approvers_are_held_to_the_approval_annotation_where_the_server_can(
    tools: chart_check.Tools,
) -> None:
    """Rendered where the API server serves admissionregistration.k8s.io/v1 VAPs (1.30+), for
    Remediation UPDATEs by whoever may not `update` them (the approver role has only patch);
    tests/e2e/test_upgrade.py shows the real API server refusing a spec change by an approver
    and allowing the annotation."""
    docs = chart_check.render(tools, api_versions=(chart_check.VALIDATING_ADMISSION_POLICY_API,))
    policy, binding = _approver_policy(docs)
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["remediations"]  # not remediations/status: the operator's
    assert rule["operations"] == ["UPDATE"]
    [condition] = policy["spec"]["matchConditions"]
    assert "check('update')" in condition["expression"]
    assert all(
        "remediation.gpuops.io/approve" in v["message"] for v in policy["spec"]["validations"]
    )
    approver = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-approver")
    ]
    assert ("remediation.gpuops.io", "remediations", "update") not in chart_check.granted(
        approver[0]
    )
    # Where the server lacks the API (1.28, 1.29) or it is turned off: not rendered.
    assert not [d for d in chart_check.render(tools) if "ValidatingAdmission" in d["kind"]]
    off = chart_check.render(
        tools,
        overrides=("rbac.approverPolicy.enabled=false",),
        api_versions=(chart_check.VALIDATING_ADMISSION_POLICY_API,),
    )
    assert not [d for d in off if "ValidatingAdmission" in d["kind"]]


def test_node_problem_detector_gets_a_privileged_namespace_of_its_own(
    rendered: dict[str, list[Document]], tools: chart_check.Tools
) -> None:
    """Its pods are privileged with a hostPath: the restricted operator namespace would refuse
    them, so they run in `<namespace>-node-problem-detector`, labelled privileged."""
    docs = rendered["npd-values"]
    operator = one(docs, "Deployment")["metadata"]["namespace"]
    npd = f"{operator}-node-problem-detector"
    namespaces = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}
    labels = namespaces[npd]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    npd_objects = [
        d
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        == "node-problem-detector"
        and d["kind"] not in ("Namespace", "ClusterRoleBinding")
    ]
    assert {d["kind"] for d in npd_objects} == {"DaemonSet", "ServiceAccount", "ConfigMap"}
    assert {d["metadata"]["namespace"] for d in npd_objects} == {npd}
    [binding] = [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("-npd")
    ]
    assert binding["subjects"][0]["namespace"] == npd
    # No privileged pod is left in the operator's namespace.
    for d in docs:
        if d["kind"] in ("DaemonSet", "Deployment") and d["metadata"]["namespace"] == operator:
            for container in d["spec"]["template"]["spec"]["containers"]:
                assert not container.get("securityContext", {}).get("privileged")
    # The NOTES say where it runs.
    notes = chart_check.run_tool(
        [
            tools.helm, "install", "remediation-operator", str(chart_check.CHART),
            "-n", chart_check.NAMESPACE, "--dry-run=client",
            "--set", "nodeProblemDetector.enabled=true",
        ]
    )  # fmt: skip
    assert notes.returncode == 0, notes.stderr
    assert f"node-problem-detector runs in namespace {npd} (privileged" in notes.stdout
    # A namespace the user brings: not rendered, and the objects follow its name.
    own = chart_check.render(
        tools,
        overrides=(
            "nodeProblemDetector.enabled=true",
            "nodeProblemDetector.namespace.create=false",
            "nodeProblemDetector.namespace.name=npd",
        ),
    )
    assert "npd" not in {d["metadata"]["name"] for d in own if d["kind"] == "Namespace"}
    assert one(own, "DaemonSet")["metadata"]["namespace"] == "npd"


def test_no_example_policy_can_take_over_a_chart_object(
    rendered: dict[str, list[Document]], tools: chart_check.Tools
) -> None:
    """Applying an example must never overwrite a Helm-managed object (the next `helm upgrade`
    would fail on a server-side-apply conflict): no example's kind and name equal a rendered
    object's, for any values set, the default policy switched on included."""
    examples = {
        (doc["kind"], doc["metadata"]["name"])
        for path in sorted(chart_check.EXAMPLES.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and "metadata" in doc
    }
    assert ("RemediationPolicy", "gpu-xid-ladders") in examples
    sets = [
        *rendered.values(),
        chart_check.render(tools, overrides=("defaultPolicy.enabled=true",)),
    ]
    chart_objects = {(d["kind"], d["metadata"]["name"]) for docs in sets for d in docs}
    assert ("RemediationPolicy", "gpu-default") in chart_objects
    assert examples & chart_objects == set()
