"""The live node map keeps selections and the NotReady set right through every change."""

from __future__ import annotations

from remediation_operator.domain.fleet import Condition, NodeView
from remediation_operator.domain.selectors import LabelSelector, Operator, Requirement
from remediation_operator.engine.node_index import NodeIndex


def view(name: str, pool: str, ready: str | None = "True") -> NodeView:
    conditions = () if ready is None else (Condition("Ready", ready),)
    return NodeView(name=name, labels={"pool": pool}, conditions=conditions)


H100 = LabelSelector(match_labels={"pool": "h100"})
NOT_A100 = LabelSelector(match_expressions=(Requirement("pool", Operator.NOT_IN, ("a100",)),))


def test_selections_follow_label_changes_additions_and_deletions() -> None:
    index = NodeIndex({"n1": view("n1", "h100"), "n2": view("n2", "a100")})
    assert set(index.selected(H100)) == {"n1"}
    assert set(index.selected(NOT_A100)) == {"n1"}

    index["n2"] = view("n2", "h100")
    index["n3"] = view("n3", "l4")
    assert set(index.selected(H100)) == {"n1", "n2"}
    assert set(index.selected(NOT_A100)) == {"n1", "n2", "n3"}

    del index["n1"]
    assert set(index.selected(H100)) == {"n2"}
    assert set(index.selected(LabelSelector())) == {"n2", "n3"}
    assert index.selected(H100)["n2"] is index["n2"], "selections hold the current views"


def test_not_ready_tracks_the_ready_condition_only() -> None:
    index = NodeIndex({"n1": view("n1", "h100"), "n2": view("n2", "h100", "Unknown")})
    index["n3"] = view("n3", "h100", None)
    assert set(index.not_ready()) == {"n2"}, "no Ready condition yet is not NotReady"

    index["n1"] = view("n1", "h100", "False")
    index["n2"] = view("n2", "h100", "True")
    assert set(index.not_ready()) == {"n1"}
    del index["n1"]
    assert set(index.not_ready()) == set()
    assert len(index) == 2
    assert "n1" not in index
