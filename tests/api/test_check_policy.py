"""`remediation-operator check-policy`: what a policy author sees before applying a policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation_operator import cli
from tests.api.conftest import EXAMPLES, GOOD_EXAMPLES, INVALID_EXAMPLES


def check(capsys: pytest.CaptureFixture[str], *files: Path | str) -> tuple[int, list[str]]:
    code = cli.main(["check-policy", *map(str, files)])
    return code, capsys.readouterr().out.splitlines()


def expected_path(example: Path) -> str:
    """Each invalid example says in a `# expect: <field path>` comment which field is wrong."""
    for line in example.read_text(encoding="utf-8").splitlines():
        if line.startswith("# expect: "):
            return line.removeprefix("# expect: ").strip()
    raise AssertionError(f"{example} has no '# expect:' line")


def test_good_examples_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(capsys, *GOOD_EXAMPLES)
    assert code == 0
    assert [line for line in lines if ": info: " not in line] == [f"{p}: ok" for p in GOOD_EXAMPLES]


def test_each_stale_after_match_says_what_a_missing_condition_means(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect 4 (docs part): the author learns which nodes a `staleAfter` rule can fire on."""
    policy = tmp_path / "stale.yaml"
    policy.write_text(
        (EXAMPLES / "minimal-policy.yaml").read_text() + "  - name: agent-silent\n"
        "    match:\n"
        "    - {type: GPUProblem, staleAfter: 5m}\n"
        "    - {type: AcceleratedHardwareReady, staleAfter: 15m, whenMissing: Fault}\n"
        "    - {type: GPUProblem, status: 'True'}\n"
        "    ladder: [{action: Cordon}]\n"
        "    onExhausted: Hold\n"
    )
    code, lines = check(capsys, policy)
    assert code == 0
    assert lines[0] == f"{policy}: ok"
    ignore, fault = lines[1:]
    assert ignore.startswith(f"{policy}: info: spec.faults[1].match[0]: GPUProblem with its")
    assert "unchanged for 5m shows fault agent-silent" in ignore
    assert "never reported GPUProblem is not faulty (whenMissing: Ignore)" in ignore
    assert fault.startswith(f"{policy}: info: spec.faults[1].match[1]: AcceleratedHardwareReady")
    assert "never reported AcceleratedHardwareReady shows it too (whenMissing: Fault)" in fault


def test_there_are_invalid_examples_of_every_kind() -> None:
    names = {p.stem for p in INVALID_EXAMPLES}
    for kind in (
        "bad-duration",
        "unknown-action",
        "ladder-out-of-order",
        "bad-regex",
        "bad-budget",
        "bad-cron",
        "missing-on-exhausted",
        "unknown-field",
    ):
        assert kind in names


@pytest.mark.parametrize("example", INVALID_EXAMPLES, ids=lambda p: p.stem)
def test_each_invalid_example_fails_naming_its_field(
    capsys: pytest.CaptureFixture[str], example: Path
) -> None:
    assert example.read_text().startswith("# INVALID: ")
    code, lines = check(capsys, example)
    assert code == 1
    assert lines, "an invalid policy must print why"
    assert [line.split(": ")[1] for line in lines] == [expected_path(example)], lines
    assert all(line.startswith(f"{example}: ") for line in lines)


def test_mixed_files_report_each_and_fail(capsys: pytest.CaptureFixture[str]) -> None:
    bad = EXAMPLES / "invalid" / "bad-duration.yaml"
    code, lines = check(capsys, GOOD_EXAMPLES[0], bad)
    assert code == 1
    assert lines[0] == f"{GOOD_EXAMPLES[0]}: ok"
    assert lines[-1].startswith(f"{bad}: spec.faults[0].tolerate: '5 minutes' is not a duration")


def test_multi_document_files_name_the_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = (EXAMPLES / "minimal-policy.yaml").read_text()
    bad = (EXAMPLES / "invalid" / "bad-regex.yaml").read_text()
    both = tmp_path / "both.yaml"
    both.write_text(f"{good}\n---\n{bad}")
    code, lines = check(capsys, both)
    assert code == 1
    assert lines == [
        f"{both} (document 2): spec.faults[0].match[0].reason: 'NvidiaXID(46|62Error' is not a"
        " valid RE2 regular expression: missing ): NvidiaXID(46|62Error (RE2 has no"
        " backreferences or lookarounds; matching is linear-time)"
    ]
    both.write_text(f"{good}\n---\n{good}")
    assert check(capsys, both) == (0, [f"{both}: ok"])


def test_yaml_syntax_errors_give_the_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: remediation.gpuops.io/v1alpha1\nkind: [unclosed\nspec: {}\n")
    code, lines = check(capsys, broken, EXAMPLES / "invalid" / "bad-cron.yaml")
    assert code == 2  # worse than invalid
    assert lines[0].startswith(f"{broken}:3:")
    assert "YAML syntax error" in lines[0]
    assert "spec.budgets[0].schedule" in lines[1]


def test_unreadable_and_empty_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    code, lines = check(capsys, missing)
    assert code == 2
    assert lines[0].startswith(f"{missing}: cannot read:")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    assert check(capsys, empty) == (1, [f"{empty}: no YAML document found"])


def test_other_kinds_are_not_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node.yaml"
    node.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\n")
    code, lines = check(capsys, node)
    assert code == 1
    assert f"{node}: apiVersion: 'v1' is not remediation.gpuops.io/v1alpha1" in lines
    assert f"{node}: kind: 'Node' is not RemediationPolicy" in lines
    assert f"{node}: spec: is required" in lines


def test_the_example_in_the_policy_docs_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    block = docs.split("## A full example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    example = tmp_path / "from-docs.yaml"
    example.write_text(block)
    code, lines = check(capsys, example)
    assert code == 0
    assert lines[0] == f"{example}: ok"
    assert all(line.startswith(f"{example}: info: ") for line in lines[1:])


def test_catalog_prints_where_each_catalog_reason_lands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "apiVersion: remediation.gpuops.io/v1alpha1\n"
        "kind: RemediationPolicy\n"
        "metadata: {name: small}\n"
        "spec:\n"
        "  nodeSelector: {}\n"
        "  faults:\n"
        "  - name: reset\n"
        "    match:\n"
        "    - {type: AcceleratedHardwareReady, status: 'False', reason: 'NvidiaXID(62|79)Error'}\n"
        "    ladder: [{action: Cordon}, {action: Drain}, {action: GPUReset}, {action: Reboot},"
        " {action: Replace}]\n"
        "  - name: everything-else\n"
        "    match:\n"
        "    - {type: AcceleratedHardwareReady, status: 'False',"
        " exceptReason: 'NvidiaXID63Error'}\n"
        "    ladder: [{action: Cordon}]\n"
        "    onExhausted: Hold\n"
    )
    assert cli.main(["check-policy", "--catalog", str(policy)]) == 0
    lines = capsys.readouterr().out.splitlines()

    def row(kind: str, code: int, agent_type: str) -> str:
        return next(line for line in lines if f": {kind} {code} " in line and agent_type in line)

    xid62 = row("XID", 62, "AcceleratedHardwareReady")
    assert "RESET_GPU" in xid62
    assert "reset" in xid62
    assert "differs" not in xid62  # the catalog's own ladder
    xid79 = row("XID", 79, "AcceleratedHardwareReady")
    assert "RESTART_BM" in xid79
    assert "differs (catalog: Cordon, Drain, Replace)" in xid79
    xid63 = row("XID", 63, "AcceleratedHardwareReady")
    assert "no action" in xid63  # the exception left it out
    assert "differs" not in xid63  # NVIDIA: IGNORE
    unknown = row("DCGM", 44, "DCGMHealthCode44")
    assert "everything-else" in unknown
    assert "REPORT_ISSUE" in unknown


def _as_list(*documents: str, kind: str = "List") -> str:
    """What `kubectl get remediationpolicies -o yaml` prints: the objects under `items`."""
    import yaml

    items = [yaml.safe_load(document) for document in documents]
    return yaml.safe_dump({"apiVersion": "v1", "kind": kind, "items": items})


@pytest.mark.parametrize("kind", ["List", "RemediationPolicyList"])
def test_kubectl_get_output_is_checked_item_by_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """The policies running in a cluster are checked as `kubectl get -o yaml` prints them: a
    bad item is named by its position and field, the good one does not hide it."""
    good = (EXAMPLES / "minimal-policy.yaml").read_text()
    bad = good.replace("name: minimal", "name: broken").replace("timeout: 30m", "timeout: soon")
    listed = tmp_path / "running.yaml"
    listed.write_text(_as_list(good, bad, kind=kind))
    code, lines = check(capsys, listed)
    assert code == 1
    assert lines
    assert all(line.startswith(f"{listed} (item 2): ") for line in lines), lines
    assert any("spec.faults[0].ladder[1].timeout" in line for line in lines), lines

    listed.write_text(_as_list(good, kind=kind))
    code, lines = check(capsys, listed)
    assert (code, lines[0]) == (0, f"{listed}: ok")


def test_an_empty_list_is_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "none.yaml"
    empty.write_text(_as_list())
    assert check(capsys, empty) == (1, [f"{empty}: the List has no items"])


def test_dash_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kubectl get remediationpolicies -o yaml | remediation-operator check-policy -`."""
    import io
    import sys

    text = _as_list((EXAMPLES / "minimal-policy.yaml").read_text())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, lines = check(capsys, "-")
    assert (code, lines[0]) == (0, "-: ok")
