"""The fault catalog: every shipped class is usable, and bad entries are named."""

from __future__ import annotations

import pytest

from remediation_emulator.fleet import catalog
from remediation_emulator.fleet.catalog import CatalogError


def test_the_shipped_catalog_has_the_classes_the_demo_and_docs_name() -> None:
    faults = catalog.load()
    for name in (
        "xid-79",
        "xid-48",
        "xid-62",
        "xid-64",
        "nvlink",
        "dcgm-health",
        "transient",
        "agent-silent",
    ):
        assert name in faults
    assert faults["xid-48"].reason == "NvidiaDoubleBitError"
    assert faults["nvlink"].reason == "NvidiaNVLinkError"
    assert faults["xid-79"].reset_fails
    assert faults["transient"].clears_by_itself
    assert faults["agent-silent"].silent


def test_lookup_of_an_unknown_class_lists_the_known_ones() -> None:
    with pytest.raises(
        CatalogError, match=r"unknown fault class 'xid-999'; known classes: .*xid-79"
    ):
        catalog.lookup(catalog.load(), "xid-999")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x"}, r"entry 0 \(x\): missing field 'summary'"),
        (
            {
                "name": "x",
                "summary": "s",
                "bucket": "b",
                "reason": "R",
                "message": "m",
                "reset_clears": 2,
                "reboot_clears": 0.5,
            },
            r"'reset_clears' is a probability",
        ),
        (
            {
                "name": "x",
                "summary": "s",
                "bucket": "b",
                "reason": "R",
                "message": "m",
                "reset_clears": 0.5,
                "reboot_clears": 0.5,
                "colour": "red",
            },
            r"unknown field 'colour'",
        ),
        (
            {
                "name": "x",
                "summary": "s",
                "bucket": "b",
                "reason": "",
                "message": "m",
                "reset_clears": 0.5,
                "reboot_clears": 0.5,
            },
            r"'reason' is required unless the fault is silent",
        ),
        (
            {
                "name": "x",
                "summary": "s",
                "bucket": "b",
                "reason": "R",
                "message": "m",
                "reset_clears": "high",
                "reboot_clears": 0.5,
            },
            r"field 'reset_clears' must be float",
        ),
    ],
)
def test_malformed_entries_are_rejected_with_the_field_named(
    entry: dict[str, object], message: str
) -> None:
    with pytest.raises(CatalogError, match=message):
        catalog.parse([entry])


def test_duplicate_names_are_rejected() -> None:
    entry = {
        "name": "x",
        "summary": "s",
        "bucket": "b",
        "reason": "R",
        "message": "m",
        "reset_clears": 0.5,
        "reboot_clears": 0.5,
    }
    with pytest.raises(CatalogError, match="duplicate name 'x'"):
        catalog.parse([entry, entry])
