"""Upgrade from the previous release exactly as docs/install.md says, with Helm 3 and Helm 4,
on a real kube-apiserver; then a fault, a roll back and an uninstall.

The previous release (0.1.0) is installed as its own install page said, from the copy recorded
in tests/e2e/releases/0.1.0 (chart with the CRDs in its crds/, examples, docs), and its example
policies are applied. Then docs/install.md's "Upgrade" steps run literally (check the policies,
adopt the CRDs, CRD chart, operator chart), a fault is cordoned and recovered by the operator
started with the upgraded Deployment's own flags and ServiceAccount token (so the new flags and
the new, narrower RBAC are what runs), an approver is held to the approval annotation, the
operator release is rolled back and both releases are uninstalled as the page says. At each
point the CRDs, policies, RBAC and namespaces are asserted to be what the page says.

Real: kube-apiserver, etcd, kube-controller-manager (namespace, garbage-collector and
ClusterRole aggregation controllers), helm v3.17.2 and v4.1.4, kubectl, both charts, the
operator process. Faked: the fleet plays the kubelet and the node agent (tests/e2e/conftest);
the Helm-installed Deployment's pods never run (no scheduler or kubelet for them), so the
operator runs as a local process with that Deployment's flags and ServiceAccount.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.documented import (
    CRD_NAMES,
    CRD_PATH,
    ROOT,
    Shell,
    commands,
    crd,
    empty_cluster,
    helm,
    owned_by_the_crd_release,
)
from tests.e2e.conftest import E2E_CONFIG, POLICIES, Scenario
from tests.e2e.control_plane import AdminClient, ApiError, RealCluster
from tests.integration.conftest import cordon_only, eventually, is_cordoned_by_us

PREVIOUS = ROOT / "tests" / "e2e" / "releases" / "0.1.0"
NAMESPACE = "remediation-system"
EXECUTORS = f"{NAMESPACE}-executors"
RELEASE = "remediation-operator"
VERSION = "0.2.0"
OLD_EXAMPLES = ("demo-policy.yaml", "dryrun-policy.yaml", "minimal-policy.yaml")
"""The previous release's example policies a user applies. Its fourth, gpu-default-policy.yaml,
has the name of the chart's default policy: applying it took the Helm-managed object over (the
example is renamed in 0.2.0, see CHANGELOG.md); a user following the docs applied the chart's."""
USER_POLICIES = ("demo", "gpu-dryrun", "minimal")
DEFAULT_POLICY = f"{POLICIES}/gpu-default"
CLUSTER_ROLE = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}"
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}"
VAP = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{RELEASE}-approver"
APPROVER = "oncall-alice"


def rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def role(admin: AdminClient, namespace: str, name: str) -> dict[str, Any] | None:
    return admin.find(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}")


def container(admin: AdminClient) -> dict[str, Any]:
    found: dict[str, Any] = admin.get(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
    return found


def policy_fields(cluster: RealCluster) -> set[str]:
    schema = crd(cluster)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


def edit_may(admin: AdminClient, resource: str, verb: str) -> bool:
    """Does the built-in `edit` ClusterRole (filled by the aggregation controller) grant it?"""
    edit = admin.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/edit")
    return ("remediation.gpuops.io", resource, verb) in rules(edit)


def namespace_gone(admin: AdminClient, name: str) -> bool:
    return admin.find(f"/api/v1/namespaces/{name}") is None


def previous_release(cluster: RealCluster, old: Shell) -> None:
    """0.1.0 installed as its docs' "Install" said, and its example policies applied."""
    install = [
        c
        for c in commands("Install", PREVIOUS / "docs" / "install.md")
        if c.startswith(("kubectl create", "kubectl label", "helm install"))
    ]
    assert [c.split()[:2] for c in install] == [
        ["kubectl", "create"],
        ["kubectl", "label"],
        ["helm", "install"],
    ], install
    for command in install:
        old(command)
    for example in OLD_EXAMPLES:
        old(f"kubectl apply -f examples/{example}")


def assert_previous_state(cluster: RealCluster) -> None:
    admin = cluster.admin
    assert not owned_by_the_crd_release(crd(cluster)), "0.1.0 made the CRDs from crds/"
    assert "weight" not in policy_fields(cluster)
    assert ("batch", "jobs", "watch") in rules(admin.get(CLUSTER_ROLE)), "0.1.0: cluster-wide"
    assert container(admin)["image"] == "registry.example.com/remediation-operator:0.1.0"
    assert admin.get(DEFAULT_POLICY)["spec"]["mode"] == "DryRun"
    assert namespace_gone(admin, EXECUTORS)


def assert_upgraded_state(cluster: RealCluster, shell: Shell) -> None:
    """What docs/install.md "Upgrade" says the upgrade leaves."""
    admin = cluster.admin
    for name in CRD_NAMES:
        assert owned_by_the_crd_release(crd(cluster, name)), crd(cluster, name)["metadata"]
    assert "weight" in policy_fields(cluster), "the new schema arrived"
    for name in USER_POLICIES:
        assert admin.find(f"{POLICIES}/{name}") is not None, name
    old = Shell(cluster, shell.helm, cwd=PREVIOUS)
    for example in OLD_EXAMPLES:
        assert "unchanged" in old(f"kubectl apply -f examples/{example}"), example
    assert admin.get(DEFAULT_POLICY)["spec"]["mode"] == "DryRun", "the user's value stays"
    main = container(admin)
    assert main["image"] == f"registry.example.com/remediation-operator:{VERSION}", (
        "--reset-then-reuse-values kept image.repository and took the new appVersion"
    )
    assert f"--executor-namespace={EXECUTORS}" in main["args"]
    executors = admin.get(f"/api/v1/namespaces/{EXECUTORS}")
    assert executors["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    cluster_rules = rules(admin.get(CLUSTER_ROLE))
    assert not {r for r in cluster_rules if r[1] == "jobs"}, "no Job access cluster-wide"
    executor_role = role(admin, EXECUTORS, f"{RELEASE}-executor")
    assert executor_role is not None
    assert {("batch", "jobs", v) for v in ("get", "list", "watch", "create")} <= rules(
        executor_role
    )
    old_role = role(admin, NAMESPACE, RELEASE)
    assert old_role is not None
    assert not {r for r in rules(old_role) if r[1] == "jobs"}, "Jobs left the operator's namespace"
    assert admin.find(VAP) is not None


async def fault_is_cordoned_and_recovered(e2e: Scenario) -> None:
    """The upgraded release's own flags (they include --executor-namespace, which 0.1.0's
    binary refused) and its ServiceAccount's token, with its RBAC enforced."""
    args = container(e2e.admin)["args"]
    kept = ("--namespace=", "--executor-namespace=", "--lease-name=", "--retention=")
    flags = [a for a in args if a.startswith(kept)]
    assert len(flags) == len(kept), args
    account = e2e.admin.get(DEPLOYMENT)["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = e2e.cluster.service_account_kubeconfig(NAMESPACE, account)
    node = e2e.node_names()[0]
    # Selects only this test's nodes and outweighs the example policies that select them too.
    e2e.apply(e2e.policy("upgrade-check", faults=cordon_only(), weight=100))
    operator = await e2e.start_operator(
        "upgraded", *flags, kubeconfig=kubeconfig, namespace=NAMESPACE
    )
    e2e.fleet.inject(node, "transient")
    await eventually(lambda: is_cordoned_by_us(e2e.node(node)), what="cordon")
    await eventually(lambda: e2e.phase(node) == "Succeeded", within=60, what="recovery")
    assert (e2e.remediation(node) or {})["status"]["reason"] == "Recovered"
    await operator.stop()
    log = operator.log.read_text()
    assert "forbidden" not in log.lower(), log[-3000:]


def approver_changes_only_the_annotation(e2e: Scenario) -> None:
    """The -approver role bound to a group: annotating works, a spec change is refused by the
    approver ValidatingAdmissionPolicy (RBAC alone cannot tell them apart)."""
    admin = e2e.admin
    admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "e2e-oncall-approvers"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{RELEASE}-approver",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "oncall"}
            ],
        }
    )
    approver = AdminClient(e2e.cluster.user_kubeconfig(APPROVER, ("oncall",)))
    [remediation] = [r for r in e2e.remediations() if r.get("status")][-1:]
    path = f"/apis/remediation.gpuops.io/v1alpha1/remediations/{remediation['metadata']['name']}"

    def approve() -> bool:
        approver.patch(
            path, {"metadata": {"annotations": {"remediation.gpuops.io/approve": "Replace"}}}
        )
        return True

    # The policy's bindings reach the API server's admission a moment after they are created.
    admin.wait_for(approve, within=10, what="the approver's annotation")
    approved = admin.get(path)["metadata"]["annotations"]["remediation.gpuops.io/approve"]
    assert approved == "Replace"

    def refused() -> ApiError | None:
        try:
            approver.patch(path, {"spec": {"nodeName": "another-node"}})
        except ApiError as error:
            return error
        admin.patch(path, {"spec": {"nodeName": remediation["spec"]["nodeName"]}})
        return None

    error: ApiError = admin.wait_for(refused, within=10, what="the approver policy to refuse")
    assert "may change only the remediation.gpuops.io/approve annotation" in error.message
    assert admin.get(path)["spec"] == remediation["spec"]
    with pytest.raises(ApiError) as labels:
        approver.patch(path, {"metadata": {"labels": {"team": "oncall"}}})
    assert "not its labels" in labels.value.message
    admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/e2e-oncall-approvers")


def clean_up(cluster: RealCluster, shell: Shell) -> None:
    subprocess.run(
        [shell.helm, "uninstall", RELEASE, f"{RELEASE}-crd", "-n", NAMESPACE, "--ignore-not-found"],
        env=shell.env,
        capture_output=True,
        check=False,
        timeout=120,
    )
    cluster.admin.delete(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/e2e-oncall-approvers"
    )
    for name in (NAMESPACE, EXECUTORS, f"{NAMESPACE}-node-problem-detector"):
        cluster.admin.delete(f"/api/v1/namespaces/{name}")
        cluster.admin.wait_for(
            lambda name=name: namespace_gone(cluster.admin, name),
            within=120,
            what=f"namespace {name} deleted",
        )
    cluster.admin.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))


# the kind agent: its condition clears with the hardware (the real ones stay until restarted, D74)
@pytest.mark.fleet(config=E2E_CONFIG.with_(agent="kind"))
@pytest.mark.timeout(600)
@pytest.mark.parametrize("major", ["helm3", "helm4"])
async def test_upgrade_from_the_previous_release_as_documented(
    scenario: Scenario, major: str
) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    e2e = scenario
    cluster = e2e.cluster
    admin = cluster.admin
    shell = Shell(cluster, helm(major))
    try:
        empty_cluster(cluster)
        previous_release(cluster, Shell(cluster, shell.helm, cwd=PREVIOUS))
        assert_previous_state(cluster)
        assert admin.find(f"{CLUSTER_ROLE}-edit") is None, "0.1.0 had no roles for people"

        # docs/install.md "Upgrade", step for step.
        upgrade = list(commands("Upgrade"))
        steps = [c for c in upgrade if not c.startswith(("helm rollback", "kubectl apply"))]
        assert [" ".join(c.split()[:2]) for c in steps] == [
            "remediation-operator check-policy",
            "kubectl annotate",
            "kubectl label",
            "helm upgrade",
            "helm upgrade",
        ], upgrade
        # 1. check the policies this user applied, with the new release's check-policy.
        [check] = [c for c in steps if c.endswith("my-policies/*.yaml")]
        files = " ".join(f"examples/{example}" for example in OLD_EXAMPLES)
        Shell(cluster, shell.helm, cwd=PREVIOUS)(check.replace("my-policies/*.yaml", files))
        # 2-3. adopt the CRDs, upgrade the CRD chart, upgrade the operator.
        for command in steps[1:]:
            shell(command)
        assert_upgraded_state(cluster, shell)
        # The aggregation controller fills `edit` from -view (reading policies) but not from
        # -edit (writing them): aggregating writes is opt-in (rbac.aggregateToEdit).
        await eventually(
            lambda: edit_may(admin, "remediationpolicies", "get"),
            within=30,
            what="the aggregation controller adding -view to `edit`",
        )
        assert admin.find(f"{CLUSTER_ROLE}-edit") is not None
        assert not edit_may(admin, "remediationpolicies", "create")
        history = yaml.safe_load(shell(f"helm history {RELEASE} -n {NAMESPACE} -o yaml"))
        assert [r["chart"] for r in history] == [
            "remediation-operator-0.1.0",
            f"remediation-operator-{VERSION}",
        ]

        await fault_is_cordoned_and_recovered(e2e)
        approver_changes_only_the_annotation(e2e)

        # "Roll back": the operator release only. A Job left in the executor namespace goes
        # with it, as the page warns.
        admin.create(
            f"/apis/batch/v1/namespaces/{EXECUTORS}/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "gpu-reset-left-behind"},
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "reset", "image": "busybox:1.36"}],
                        }
                    },
                },
            },
        )
        [rollback] = [c for c in upgrade if c.startswith("helm rollback")]
        shell(rollback)
        await eventually(
            lambda: namespace_gone(admin, EXECUTORS),
            within=120,
            what="the executor namespace and its Jobs deleted by the roll back",
        )
        assert container(admin)["image"] == "registry.example.com/remediation-operator:0.1.0"
        assert ("batch", "jobs", "watch") in rules(admin.get(CLUSTER_ROLE))
        assert admin.find(VAP) is None
        for name in CRD_NAMES:  # the CRD release stays where it is, schema and marks
            assert owned_by_the_crd_release(crd(cluster, name)), name
        assert "weight" in policy_fields(cluster)
        for name in (*USER_POLICIES, "gpu-default", "upgrade-check"):
            assert admin.find(f"{POLICIES}/{name}") is not None, name
        assert e2e.remediations(), "the Remediation history stays"

        # "Uninstall", step 4: both releases.
        uninstall = [c for c in commands("Uninstall") if c.startswith("helm uninstall")]
        assert len(uninstall) == 2, uninstall
        for command in uninstall:
            shell(command)
        assert admin.find(DEFAULT_POLICY) is None, "the chart's default policy goes"
        for name in USER_POLICIES:
            assert admin.find(f"{POLICIES}/{name}") is not None, f"{name} is the user's: it stays"
        for name in CRD_NAMES:
            assert admin.find(CRD_PATH + name) is not None, f"{name} kept"
        assert admin.find(CLUSTER_ROLE) is None
        assert admin.find(f"/api/v1/namespaces/{NAMESPACE}") is not None, "made by kubectl"
    finally:
        clean_up(cluster, shell)


def test_the_recorded_release_is_the_released_one() -> None:
    """tests/e2e/releases/0.1.0 is 0.1.0 as shipped: its chart's version, its CRDs in crds/."""
    chart = yaml.safe_load(
        (PREVIOUS / "charts" / "remediation-operator" / "Chart.yaml").read_text()
    )
    assert (chart["version"], chart["appVersion"]) == ("0.1.0", "0.1.0")
    crds = sorted(
        p.name for p in (PREVIOUS / "charts" / "remediation-operator" / "crds").glob("*.yaml")
    )
    assert crds == sorted(f"{name}.yaml" for name in CRD_NAMES)
    assert Path(PREVIOUS / "examples" / "gpu-default-policy.yaml").is_file()
