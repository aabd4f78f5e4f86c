"""CRDs used by the emulator tests: a Remediation-like CRD with printer columns and a policy CRD.

They mirror the shape of the project's CRDs (cluster-scoped, status subresource, printer
columns) so the tests do not depend on `crds/` being generated yet.
"""

from __future__ import annotations

from typing import Any

GROUP = "remediation.gpuops.io"


def remediation_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"remediations.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "plural": "remediations",
                "singular": "remediation",
                "kind": "Remediation",
                "shortNames": ["rem"],
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["nodeName"],
                                    "properties": {
                                        "nodeName": {"type": "string"},
                                        "fault": {"type": "string"},
                                        "attempt": {"type": "integer", "minimum": 1, "default": 1},
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "phase": {
                                            "type": "string",
                                            "enum": [
                                                "Pending",
                                                "Running",
                                                "Blocked",
                                                "Succeeded",
                                                "Failed",
                                            ],
                                        },
                                        "step": {"type": "string"},
                                        "reason": {"type": "string"},
                                        "conditions": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "x-kubernetes-preserve-unknown-fields": True,
                                            },
                                        },
                                    },
                                },
                            },
                        }
                    },
                    "additionalPrinterColumns": [
                        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
                        {"name": "Fault", "type": "string", "jsonPath": ".spec.fault"},
                        {"name": "Step", "type": "string", "jsonPath": ".status.step"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Attempt", "type": "integer", "jsonPath": ".spec.attempt"},
                        {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


def policy_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"remediationpolicies.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "plural": "remediationpolicies",
                "singular": "remediationpolicy",
                "kind": "RemediationPolicy",
                "shortNames": ["rpol"],
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "mode": {"type": "string", "enum": ["Enforce", "DryRun"]},
                                        "paused": {"type": "boolean"},
                                        "faults": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "x-kubernetes-preserve-unknown-fields": True,
                                            },
                                        },
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
