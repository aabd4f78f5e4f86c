"""What the contract suite (tests/contract) found the emulator doing unlike a real server, pinned
down without a real server: protobuf bodies, OpenAPI for `kubectl explain`, int-or-string
checks, the cause for skipped CEL rules, 406 for protobuf-only clients."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from remediation_emulator import apiserver, errors, protobuf, schema

PROTOBUF = "application/vnd.kubernetes.protobuf"
KUBECTL_CREATE_NS_FOO = (
    b'k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1b\n\x13\n\x03foo\x12\x00\x1a\x00"\x00*\x00'
    b'2\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00"\x00'
)
"""The body kubectl 1.32 sends for `kubectl create namespace foo` (captured)."""


def field(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: a varint (int) or a length-delimited payload (bytes)."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return b"k8s\x00" + field(1, type_meta) + field(2, raw)


def meta(name: str, **labels: str) -> bytes:
    entries = b"".join(
        field(11, field(1, k.encode()) + field(2, v.encode())) for k, v in labels.items()
    )
    return field(1, field(1, name.encode()) + field(3, b"") + field(7, 0) + entries)


def test_kubectl_create_namespace_body_decodes_to_the_json_object() -> None:
    assert protobuf.decode(KUBECTL_CREATE_NS_FOO, custom=False) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "foo"},
    }


def test_secret_bytes_become_base64_and_zero_values_are_dropped() -> None:
    secret = (
        meta("s", app="x")
        + field(2, field(1, b"token") + field(2, b"\x00\xff"))
        + field(3, b"Opaque")
    )
    decoded = protobuf.decode(envelope("v1", "Secret", secret), custom=False)
    assert decoded == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "labels": {"app": "x"}},
        "data": {"token": "AP8="},
        "type": "Opaque",
    }


def test_a_pointer_field_keeps_its_zero_value() -> None:
    """PDB minAvailable is *IntOrString: 0 means "no pod must stay", not "absent"."""
    int_or_string = field(1, 0) + field(2, 0)
    spec = field(1, int_or_string) + field(2, field(1, field(1, b"app") + field(2, b"x")))
    pdb = protobuf.decode(
        envelope("policy/v1", "PodDisruptionBudget", meta("p") + field(2, spec)), custom=False
    )
    assert pdb["spec"] == {"minAvailable": 0, "selector": {"matchLabels": {"app": "x"}}}
    percent = field(1, 1) + field(3, b"50%")
    spec = field(3, percent)
    pdb = protobuf.decode(
        envelope("policy/v1", "PodDisruptionBudget", meta("p") + field(2, spec)), custom=False
    )
    assert pdb["spec"] == {"maxUnavailable": "50%"}


@pytest.mark.parametrize(
    ("body", "custom", "code"),
    [
        (envelope("batch/v1", "Job", meta("j")), False, 415),  # a PodSpec: not decoded
        (KUBECTL_CREATE_NS_FOO, True, 415),  # custom resources have no protobuf form
        (b"not protobuf", False, 400),
        (b"k8s\x00\n\xff", False, 400),  # truncated
        (b"k8s\x00\x08\x05", False, 400),  # a number where the type is expected
    ],
)
def test_bodies_it_cannot_read_are_refused_with_the_real_codes(
    body: bytes, custom: bool, code: int
) -> None:
    with pytest.raises(errors.ApiError) as refused:
        protobuf.decode(body, custom=custom)
    assert refused.value.code == code


async def test_protobuf_create_over_http(api: apiserver.ApiServer) -> None:
    headers = {
        "Authorization": f"Bearer {api.token('kubectl')}",
        "Content-Type": PROTOBUF,
        "Accept": f"{PROTOBUF},application/json",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{api.url}/api/v1/namespaces", data=KUBECTL_CREATE_NS_FOO, headers=headers
        ) as answer,
    ):
        assert answer.status == 201
        assert answer.content_type == "application/json"
        created = await answer.json()
    assert created["metadata"]["name"] == "foo"
    assert api.store.get("namespaces", "foo")["status"] == {"phase": "Active"}


async def test_a_client_accepting_only_protobuf_gets_406(api: apiserver.ApiServer) -> None:
    headers = {"Authorization": f"Bearer {api.token('x')}", "Accept": PROTOBUF}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{api.url}/api/v1/namespaces", headers=headers) as answer,
    ):
        assert answer.status == 406
        assert (await answer.json())["reason"] == "NotAcceptable"


INT_OR_PERCENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "nodes": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "minimum": 0,
                    "pattern": "^((100|[0-9]{1,2})%|[0-9]+)$",
                }
            },
        }
    },
}


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (-1, "Invalid value: -1: spec.nodes in body should be greater than or equal to 0"),
        ("150%", 'Invalid value: "150%": spec.nodes in body should match'),
        (True, "must be of type integer,string"),
    ],
)
def test_int_or_string_is_checked_against_pattern_and_minimum(nodes: Any, message: str) -> None:
    (cause,) = schema.validate(INT_OR_PERCENT, {"spec": {"nodes": nodes}})
    assert cause.field == "spec.nodes"
    assert message in cause.message


@pytest.mark.parametrize("nodes", [0, 7, "10%", "100%", "3"])
def test_int_or_string_accepts_both_forms(nodes: Any) -> None:
    assert schema.validate(INT_OR_PERCENT, {"spec": {"nodes": nodes}}) == []


def test_schema_errors_report_the_cel_rules_left_unchecked() -> None:
    with_rules = {
        **INT_OR_PERCENT,
        "x-kubernetes-validations": [{"rule": "has(self.spec)", "message": "spec"}],
    }
    causes = schema.validate(with_rules, {"spec": {"nodes": -1}})
    assert [c.field for c in causes] == ["spec.nodes", "<nil>"]
    assert "some validation rules were not checked" in causes[1].message
    assert schema.validate(with_rules, {"spec": {"nodes": 1}}) == []


async def test_openapi_names_each_custom_kind_for_kubectl_explain(
    api: apiserver.ApiServer,
) -> None:
    crd = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    api.store.create("customresourcedefinitions", crd)
    headers = {"Authorization": f"Bearer {api.token('x')}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{api.url}/openapi/v3/apis/example.com/v1", headers=headers) as answer,
    ):
        document = await answer.json()
    schemas = document["components"]["schemas"]
    assert schemas["example.com.v1.Widget"]["x-kubernetes-group-version-kind"] == [
        {"group": "example.com", "version": "v1", "kind": "Widget"}
    ]
