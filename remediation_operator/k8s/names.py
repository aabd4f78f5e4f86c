"""The names the operator writes on other people's objects, fixed by the runtime contract.

Kept in one place so the chart, the docs and the tests can check every label, annotation and
taint the operator may leave on a Node against one list.
"""

from __future__ import annotations

GROUP = "remediation.gpuops.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
POLICIES = "remediationpolicies"
REMEDIATIONS = "remediations"

QUARANTINE_TAINT = f"{GROUP}/quarantine"
"""Taint key (effect NoSchedule, value: the fault's name) marking nodes we quarantined."""
QUARANTINED_BY = f"{GROUP}/quarantined-by"
"""Node annotation written with our taint: the RemediationPolicy whose cordon it is."""
UNCORDON_ON_RELEASE = f"{GROUP}/uncordon-on-release"
"""Node annotation `"true"` written by a cordon that flipped spec.unschedulable itself: the
node proves the cordon was ours even before a Remediation records it (docs/decisions.md D14)."""
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
"""Node annotation keeping Karpenter's consolidation away during in-place repair."""
REPLACE_REQUESTED = f"{GROUP}/replace-requested"
"""Node label asking a human to replace the node (Manual replace provider)."""
AGENT_REQUEST = f"{GROUP}/agent-request"
"""Node annotation `<Action>:<remediation>:<attempt>` asking the node agent to act."""
AGENT_ACK = f"{GROUP}/agent-ack"
"""Node annotation `<Action>:<remediation>:<attempt>:Succeeded|Failed` set by the agent."""
APPROVE = f"{GROUP}/approve"
"""Remediation annotation: comma-separated actions an administrator approved."""
ACTION_LABEL = f"{GROUP}/action"
POLICY_LABEL = f"{GROUP}/policy"
NODE_LABEL = f"{GROUP}/node"
REMEDIATION_ANNOTATION = f"{GROUP}/remediation"
NODE_ANNOTATION = f"{GROUP}/node"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "remediation-operator"

MIRROR_POD = "kubernetes.io/config.mirror"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

KARPENTER_GROUP_VERSION = "karpenter.sh/v1"
NODECLAIMS = "nodeclaims"
