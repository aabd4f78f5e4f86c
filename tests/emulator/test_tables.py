"""Server-side printing helpers: the JSONPath subset of printer columns and age rendering."""

from __future__ import annotations

import pytest

from remediation_emulator import tables

NODE = {
    "metadata": {"name": "n"},
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "GPU", "status": "False"}]
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".metadata.name", ["n"]),
        (".status.conditions[1].type", ["GPU"]),
        (".status.conditions[*].status", ["True", "False"]),
        ('.status.conditions[?(@.type=="GPU")].status', ["False"]),
        ("{.status.conditions[0].status}", ["True"]),
        (".status.missing", []),
        (".status.conditions[5].type", []),
    ],
)
def test_jsonpath_subset(path: str, expected: list[str]) -> None:
    assert tables.jsonpath(NODE, path) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (-5, "<invalid>"),
    ],
)
def test_ages_render_like_kubectl(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_jsonpath_field_names_with_escaped_dots() -> None:
    """A printer column on a well-known label (`node.kubernetes.io/instance-type`) shows it."""
    labelled = {
        "metadata": {
            "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge", "node": "not this"}
        }
    }
    path = r".metadata.labels.node\.kubernetes\.io/instance-type"
    assert tables.jsonpath(labelled, path) == ["p5.48xlarge"]
    assert tables.jsonpath(labelled, "{" + path + "}") == ["p5.48xlarge"]
    assert tables.jsonpath(labelled, r".metadata.labels.node\.kubernetes\.io/zone") == []
