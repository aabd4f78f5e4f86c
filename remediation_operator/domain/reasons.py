"""The one vocabulary of reasons shared by events, status, conditions, logs and metric labels.

Every decision the operator takes, and every decision not to act, carries one of these
CamelCase words plus a one-sentence message. Keeping them in one enum means a reason seen in
`kubectl get remediations` can be grepped in logs and graphed in Prometheus unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # Detection and tolerance
    FaultDetected = "FaultDetected"
    """A condition matched a fault of the policy; a Remediation was opened."""
    Tolerating = "Tolerating"
    """The fault is present but has not lasted the fault's `tolerate` window yet."""
    NodeStarting = "NodeStarting"
    """The node joined recently; faults are tolerated while GPU software comes up."""
    EvidenceInsufficient = "EvidenceInsufficient"
    """Only a stale heartbeat or an Unknown status: cordon is allowed, nothing disruptive."""

    # Steps
    StepStarted = "StepStarted"
    StepSucceeded = "StepSucceeded"
    StepRetrying = "StepRetrying"
    """A step ended in a transient failure and will be retried with backoff."""
    StepFailed = "StepFailed"
    """A step ended in a permanent failure; the ladder escalates at once."""
    StepTimedOut = "StepTimedOut"
    """A step did not complete within its timeout (a permanent failure)."""
    Escalating = "Escalating"
    """The fault outlived the step's `escalateAfter`; the next step of the ladder follows."""
    WaitingToEscalate = "WaitingToEscalate"
    """The step is done; the fault is watched for `escalateAfter` before the next step."""
    RepeatOffender = "RepeatOffender"
    """The node had `history.maxEpisodes` incidents in the window; the ladder skips ahead."""
    LadderExhausted = "LadderExhausted"
    """Every step ran and the fault remains; the ladder's `onExhausted` says what happens."""

    # Step specifics
    AlreadyCordoned = "AlreadyCordoned"
    """Someone else had cordoned the node; we will not uncordon it."""
    DrainBlockedByPDB = "DrainBlockedByPDB"
    """An eviction was refused by a PodDisruptionBudget; retried with backoff."""
    DrainForced = "DrainForced"
    """The drain timed out and the policy says force: remaining pods were deleted."""
    WaitingForReboot = "WaitingForReboot"
    """The reboot was requested; waiting for a new bootID and Ready=True."""
    NodeClaimDeleted = "NodeClaimDeleted"
    """Replace handed the node to Karpenter by deleting its NodeClaim."""
    ManualReplaceRequested = "ManualReplaceRequested"
    """Replace is manual: the node is labelled for a human to replace it."""
    NodeReplaced = "NodeReplaced"
    """The node (or its NodeClaim) is gone; the incident is closed."""

    # Recovery
    FaultCleared = "FaultCleared"
    """The fault is absent; probation (`recovery.healthyFor`) has begun."""
    FaultReturned = "FaultReturned"
    """The fault came back during probation; the ladder resumes where it was."""
    Recovered = "Recovered"
    """The fault stayed absent through probation; the node is back in service."""
    GPUsNotAdvertised = "GPUsNotAdvertised"
    """Probation is over but the node advertises fewer `nvidia.com/gpu` than its capacity (the
    device plugin still marks a GPU unhealthy): the node stays cordoned until it advertises
    them all (D68)."""
    FaultGone = "FaultGone"
    """Re-check before a destructive step found the fault absent; the step was not started."""

    # Things that stop us acting
    BudgetExhausted = "BudgetExhausted"
    BudgetInvalid = "BudgetInvalid"
    RateLimited = "RateLimited"
    CircuitOpen = "CircuitOpen"
    CircuitCooldown = "CircuitCooldown"
    Paused = "Paused"
    NodeExcluded = "NodeExcluded"
    AwaitingApproval = "AwaitingApproval"
    DryRun = "DryRun"
    """Mode is DryRun: the decision is recorded and announced, nothing is changed."""

    # Cancellation
    AdminUncordoned = "AdminUncordoned"
    """An administrator uncordoned the node mid-remediation: we stop and stay out."""
    NodeDeleted = "NodeDeleted"
    """The Node object is gone (not replaced by us): nothing is left on it to give back."""
    PolicyDeleted = "PolicyDeleted"
    NodeUnselected = "NodeUnselected"
    """The node still exists but the policy's nodeSelector no longer selects it (relabelled):
    the incident is cancelled and the node given back (our cordon, taint, annotations,
    do-not-disrupt), as for PolicyDeleted (issue 24, D50)."""

    # Policy lifecycle
    PolicyAccepted = "PolicyAccepted"
    PolicyInvalid = "PolicyInvalid"
    CircuitClosed = "CircuitClosed"
    Resumed = "Resumed"

    # Added with the decision core
    FaultRemoved = "FaultRemoved"
    """The policy no longer defines the incident's fault; the Remediation is cancelled."""
    ModeChanged = "ModeChanged"
    """A DryRun incident under a policy that now enforces: closed, a real one opens."""

    # Added with the cordon-first order (docs/decisions.md D14)
    UnrecordedCordonReleased = "UnrecordedCordonReleased"
    """A node carried our cordon with no Remediation recording it (the operator stopped between
    its cordon and its record) and shows no fault: the quarantine is removed."""

    # Added with the one gate list (issue 12)
    OwnedByOtherPolicy = "OwnedByOtherPolicy"
    """Another RemediationPolicy selecting the node owns it (an active Remediation there, or a
    higher spec.weight, then the older policy, then the name): this one opens nothing there."""

    # Added with validation before return to service (issue 15, D37)
    ValidationStarted = "ValidationStarted"
    """An in-place repair succeeded; the policy's validation Job runs on the node before it may
    return to service."""
    ValidationPassed = "ValidationPassed"
    """The validation Job passed: probation, then release (or the ladder, if the fault stays)."""
    ValidationFailed = "ValidationFailed"
    """The validation Job failed or timed out: positive evidence, the ladder climbs at once."""
    EvictingBeforeReboot = "EvictingBeforeReboot"
    """The Drain moved only GPU pods (gpuPodsOnlyBeforeReset); before the Reboot restarts the
    node, the pods it left are evicted under the full drain rules (PodDisruptionBudgets
    honoured) and the reboot waits for them; the message names them (issue 22, D54)."""
    ValidationNotRun = "ValidationNotRun"
    """The validation could not run (no Job template, its pod never started, admission refused
    it): no verdict on the GPU, so the node stays cordoned for a human and nothing climbs on
    it (issue 22, D53)."""

    # Added with diagnostics before destructive steps (issue 15, D39)
    CollectingDiagnostics = "CollectingDiagnostics"
    """A destructive step is due: the policy's diagnostics Job runs first (its own timeout)."""
    DiagnosticsCollected = "DiagnosticsCollected"
    """The diagnostics Job finished; the step's record names where it wrote."""
    DiagnosticsFailed = "DiagnosticsFailed"
    """The diagnostics Job failed or timed out; recorded, and the destructive step goes on."""

    # Added with real agents' sticky conditions (issue 21, D58)
    FaultWorsened = "FaultWorsened"
    """The node now shows a more severe fault of the policy than the incident followed: the
    incident moves onto that fault's ladder after the furthest rung it reached (nothing that
    succeeded runs again)."""

    # Added with verification after a repair (issue 21, D71)
    RestartingNodePods = "RestartingNodePods"
    """A repair the policy validates succeeded: the pods of `validation.restartPods` on the
    node (the health agent's, the device plugin's: they keep stale state until they restart)
    are deleted and the operator waits for their DaemonSets to bring them back Ready."""
    NodePodsRestarted = "NodePodsRestarted"
    """Every pod of `validation.restartPods` on the node is back, Ready and created after the
    restart; the validation follows. The step's record names the new pods."""
    NodePodsNotBack = "NodePodsNotBack"
    """A restarted pod of `validation.restartPods` was not back Ready within the validation's
    timeout: no verdict on the repair, so the node stays cordoned for a human and nothing
    climbs on it (the message names the pod selector)."""
    NoFreshReport = "NoFreshReport"
    """The validation passed but the fault's condition has not been reported again since its
    agent restarted: the old report says nothing about the repair, so the node stays cordoned
    (nothing climbs) until the agent reports."""
