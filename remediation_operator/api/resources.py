"""Names of the two custom resources, in one place: CRDs, clients and printers all use these."""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "remediation.gpuops.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "gpuops"
"""`kubectl get gpuops` lists both kinds."""


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    summary: str
    """The resource's description in its CRD (`kubectl explain`)."""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


REMEDIATION_POLICY = Resource(
    "RemediationPolicy",
    "remediationpolicies",
    "remediationpolicy",
    ("rpol",),
    "Which node conditions are faults, how long to tolerate them, which repair ladder to climb"
    " (cordon, drain, GPU reset, reboot, replace), and how much of the fleet may be disrupted.",
)
REMEDIATION = Resource(
    "Remediation",
    "remediations",
    "remediation",
    ("rem",),
    "One incident on one node: the durable record and the state of its repair. At most one"
    " non-terminal Remediation exists per node.",
)
