"""Bad values are refused by `helm template`/`helm install` with a message naming the value."""

from __future__ import annotations

import json

import pytest

from tests.chart import chart_check, values_schema


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["replica=3"], "'replica' not allowed"),
        (["operator.retention=30d"], "/operator/retention"),
        (["operator.jobRetention=1d"], "/operator/jobRetention"),
        (["operator.watchQuietLimit=ten"], "/operator/watchQuietLimit"),
        (["operator.watchQuietLimit=0m0s"], "operator.watchQuietLimit: must be longer than 0s"),
        (
            ["operator.leaderElection.leaseDuration=fifteen"],
            "/operator/leaderElection/leaseDuration",
        ),
        (["operator.logFormat=xml"], "/operator/logFormat"),
        (["replicas=0"], "/replicas"),
        (["image.digest=sha256:abc"], "/image/digest"),
        (
            ["jobTemplates.diagnose.image.repository=nvcr.io/nvidia/cloud-native/dcgm"],
            "'image' not allowed",
        ),
        (["jobTemplates.diagnose.runtimeClassName=nvidia"], "'runtimeClassName' not allowed"),
        (["jobTemplates.gpuReset.clients=gpu-operatr"], "/jobTemplates/gpuReset/clients"),
        (["serviceMonitor.enable=true"], "'enable' not allowed"),
        (["defaultPolicy.name=Not_A_Name"], "/defaultPolicy/name"),
        (["image.tag=latest"], 'image tag "latest"'),
        (["podDisruptionBudget.maxUnavailable=-1"], "/podDisruptionBudget/maxUnavailable"),
        (["prometheusRule.noLeaderFor=soon"], "/prometheusRule/noLeaderFor"),
        (["defaultPolicy.spec.mode=Enforcee"], "/defaultPolicy/spec/mode"),
        (["defaultPolicy.spec.rate.max=-1"], "/defaultPolicy/spec/rate/max"),
        (["defaultPolicy.spec.tolerance=1m"], "'tolerance' not allowed"),
    ],
)
def test_bad_values_fail_naming_the_value(
    tools: chart_check.Tools, overrides: list[str], named: str
) -> None:
    result = chart_check.template(tools, overrides=overrides)
    assert result.returncode != 0
    assert named in result.stderr
    assert result.stdout == ""


def test_the_default_policy_schema_is_the_generated_one() -> None:
    """values.schema.json's defaultPolicy.spec equals what the policy models generate."""
    assert values_schema.main([]) == 0, f"stale: run `{values_schema.COMMAND}`"
    spec = json.loads(values_schema.SCHEMA.read_text())["properties"]["defaultPolicy"]
    assert spec["properties"]["spec"]["properties"]["mode"]["enum"] == ["Enforce", "DryRun"]


def test_null_drops_a_default_map(tools: chart_check.Tools) -> None:
    docs = chart_check.render(tools, overrides=["affinity=null"])
    (deployment,) = chart_check.objects(docs, "Deployment")
    assert "affinity" not in deployment["spec"]["template"]["spec"]


def test_disabling_rbac_and_service_account_renders_neither(tools: chart_check.Tools) -> None:
    docs = chart_check.render(tools, overrides=["rbac.create=false", "serviceAccount.create=false"])
    kinds = {doc["kind"] for doc in docs}
    assert kinds.isdisjoint({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
    assert "ServiceAccount" not in kinds
    (deployment,) = chart_check.objects(docs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "default"


def test_notes_tell_the_user_how_to_check_the_install(tools: chart_check.Tools) -> None:
    result = chart_check.run_tool(
        [
            tools.helm,
            "install",
            "gpu",
            str(chart_check.CHART),
            "--namespace",
            "ops",
            "--dry-run=client",
            "--set",
            "defaultPolicy.enabled=true",
        ]
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "kubectl get rpol,rem" in notes
    assert "kubectl -n ops get lease remediation-operator" in notes
    assert "logs -l app.kubernetes.io/instance=gpu" in notes
    assert "svc/gpu-remediation-operator-metrics 8080" in notes
    assert "DryRun mode" in notes
    assert "helm upgrade --install remediation-operator-crd <crd-chart> -n ops" in notes
    assert "helm upgrade gpu <chart> -n ops --reset-then-reuse-values" in notes
    assert "--reuse-values" not in notes.replace("--reset-then-reuse-values", "")
    # The shipped `clients: none` leaves the device plugin and DCGM holding the GPUs.
    assert "GPU resets stop no GPU client (jobTemplates.gpuReset.clients=none)" in notes


def test_notes_warn_of_resets_that_stop_no_gpu_client_only_when_they_do(
    tools: chart_check.Tools,
) -> None:
    def notes(*overrides: str) -> str:
        args = [tools.helm, "install", "gpu", str(chart_check.CHART), "-n", "ops"]
        args += ["--dry-run=client", *[f"--set={o}" for o in overrides]]
        result = chart_check.run_tool(args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    warning = "GPU resets stop no GPU client"
    assert warning in notes()
    assert warning not in notes("jobTemplates.gpuReset.clients=gpu-operator")
    assert warning not in notes("jobTemplates.enabled=false")
