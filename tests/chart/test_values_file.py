"""values.yaml documents every value: a user reading it needs no other page to set one."""

from __future__ import annotations

import re

import yaml

from tests.chart.chart_check import CHART

VALUES = CHART / "values.yaml"
# Values whose content is a Kubernetes or policy object, documented as a whole.
FREE_FORM = {
    "namespace.labels",
    "executors.namespace.labels",
    "resources",
    "affinity",
    "topologySpreadConstraints",
    "nodeSelector",
    "jobTemplates.gpuReset.resources",
    "jobTemplates.reboot.resources",
    "jobTemplates.validate.resources",
    "jobTemplates.diagnose.resources",
    "defaultPolicy.spec",
    "serviceMonitor.labels",
    "grafanaDashboard.labels",
    "nodeProblemDetector.nodeSelector",
    "nodeProblemDetector.namespace.labels",
    "nodeProblemDetector.resources",
}
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w.-]*):(?P<rest>.*)$")


def leaves(node: object, prefix: str = "") -> set[str]:
    """Dotted paths of every value a user can set, stopping at free-form objects."""
    if not isinstance(node, dict) or not node or prefix in FREE_FORM:
        return {prefix}
    return set().union(*(leaves(v, f"{prefix}.{k}" if prefix else k) for k, v in node.items()))


def commented(text: str) -> set[str]:
    """Dotted paths of the keys whose line is directly preceded by a comment line."""
    found: set[str] = set()
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in text.splitlines():
        match = KEY.match(line)
        if match and not line.lstrip().startswith("#"):
            indent = len(match["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([*(k for _, k in stack), match["key"]])
            if previous.lstrip().startswith("#"):
                found.add(path)
            stack.append((indent, match["key"]))
        if line.strip():
            previous = line
    return found


def test_every_value_has_a_comment() -> None:
    text = VALUES.read_text()
    missing = sorted(leaves(yaml.safe_load(text)) - commented(text))
    assert missing == []


def test_the_check_notices_an_uncommented_value() -> None:
    text = "a:\n  # documented\n  b: 1\n  c: 2\n"
    assert leaves(yaml.safe_load(text)) - commented(text) == {"a.c"}
