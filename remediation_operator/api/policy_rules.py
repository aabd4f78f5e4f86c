"""Rules a policy must follow beyond field types: order, uniqueness, fields that go together.

The CRD carries each rule a schema can express as a CEL `x-kubernetes-validations` rule on the
model (api/policy.py), so the API server refuses most of them at apply time; these checks are
the operator's (and check-policy's), run on every generation whatever the server did (an
object stored before a stricter CRD keeps its fields). They run on a spec that already passed
the schema, and each names the field to change:
- a ladder climbs: actions in `LADDER_ORDER`, none twice (a rung may be skipped);
- a ladder that does not end in Replace sets `onExhausted` (docs/decisions.md D1);
- `onTimeout: Force` and `onPDBBlocked` only on Drain, Force only with a `timeout` to run out;
- a condition match names `status`, `reason` or `staleAfter` besides `type` (a bare type
  never matches), and `whenMissing` only with `staleAfter` (it says what a never-reported
  condition means for staleness), and `positiveAfter` only on `Ready` with `status: Unknown`
  (only the control plane's verdict that the host is gone may become positive evidence);
- fault names are unique (they name Remediations and metric labels);
- a budget's `schedule` and `duration` come together, and the window is longer than zero;
- budgets limit disruptive actions only (Cordon takes no work away; the breaker limits it);
- Cordon cannot require approval: it is the safe step that keeps new work off a faulty node
  while a human decides, and waiting for approval to cordon would keep scheduling onto it;
- label selector requirements follow Kubernetes' rules (In/NotIn need values, Exists does not);
- `validation.after` and `diagnostics.before` name each action once (their schema enums
  allow GPUReset/Reboot and Reboot/Replace);
- `validation.timeout` and `diagnostics.timeout` are longer than 0s (a check given no time
  gives no verdict, issue 22);
- a `validation.restartPods[].podSelector` selects something (empty would restart every pod
  of its namespace on the node, D71).
"""

from __future__ import annotations

from remediation_operator.api.field_errors import FieldError
from remediation_operator.api.policy import (
    Budget,
    ConditionMatch,
    Fault,
    LabelSelector,
    RemediationPolicySpec,
)
from remediation_operator.domain import durations
from remediation_operator.domain.policy import (
    DISRUPTIVE,
    LADDER_ORDER,
    Action,
    OnTimeout,
)
from remediation_operator.domain.selectors import Operator

_ORDER_TEXT = ", ".join(LADDER_ORDER)


def check(spec: RemediationPolicySpec, prefix: str = "spec") -> list[FieldError]:
    errors: list[FieldError] = []
    errors += _selector(spec.node_selector, f"{prefix}.nodeSelector")
    for i, rule in enumerate(spec.drain.pods):
        errors += _selector(rule.pod_selector, f"{prefix}.drain.pods[{i}].podSelector")
    seen: dict[str, int] = {}
    for i, fault in enumerate(spec.faults):
        path = f"{prefix}.faults[{i}]"
        if fault.name in seen:
            errors.append(
                FieldError(
                    f"{path}.name",
                    f"duplicate fault name {fault.name!r} (also faults[{seen[fault.name]}])",
                )
            )
        seen.setdefault(fault.name, i)
        errors += _fault(fault, path)
    for i, budget in enumerate(spec.budgets):
        errors += _budget(budget, f"{prefix}.budgets[{i}]")
    for i, action in enumerate(spec.require_approval):
        if action is Action.Cordon:
            errors.append(
                FieldError(
                    f"{prefix}.requireApproval[{i}]",
                    "Cordon cannot require approval: it is the safe step that keeps new work off"
                    " a faulty node while a human decides",
                )
            )
    if spec.validation is not None:
        errors += _twice(spec.validation.after, f"{prefix}.validation.after")
        for i, entry in enumerate(spec.validation.restart_pods):
            path = f"{prefix}.validation.restartPods[{i}].podSelector"
            selector = entry.pod_selector
            if not selector.match_labels and not selector.match_expressions:
                errors.append(
                    FieldError(
                        path,
                        "must select something: an empty selector would restart every pod"
                        " of the namespace on the node",
                    )
                )
            errors += _selector(selector, path)
    if spec.diagnostics is not None:
        errors += _twice(spec.diagnostics.before, f"{prefix}.diagnostics.before")
    return errors


def _twice(actions: list[Action], path: str) -> list[FieldError]:
    """The schema allows only GPUReset/Reboot (validation) or Reboot/Replace (diagnostics)."""
    return [
        FieldError(f"{path}[{i}]", f"{action} is listed twice")
        for i, action in enumerate(actions)
        if action in actions[:i]
    ]


def _match(match: ConditionMatch, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if (
        match.status is None
        and match.reason is None
        and match.message is None
        and match.stale_after is None
    ):
        errors.append(
            FieldError(
                path,
                f"names only type {match.type!r}, which never matches a node: add `status`"
                ' (e.g. "True"), `reason` or `message` (regular expressions) or `staleAfter`',
            )
        )
    if match.when_missing is not None and match.stale_after is None:
        errors.append(
            FieldError(
                f"{path}.whenMissing",
                "applies only with `staleAfter` (a rule without it never fires on a missing"
                " condition): add `staleAfter` or remove `whenMissing`",
            )
        )
    if match.except_reason is not None and match.status is None and match.reason is None:
        errors.append(
            FieldError(
                f"{path}.exceptReason",
                "narrows a `status` or `reason` match: add `status` (or `reason`)",
            )
        )
    if match.positive_after is not None and (match.type != "Ready" or match.status != "Unknown"):
        errors.append(
            FieldError(
                f"{path}.positiveAfter",
                "applies only to `type: Ready` with `status: Unknown` (the control plane's"
                " verdict that the kubelet stopped posting); an agent's Unknown says only that"
                " the agent does not know",
            )
        )
    return errors


def _fault(fault: Fault, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for j, match in enumerate(fault.match):
        errors += _match(match, f"{path}.match[{j}]")
    previous: tuple[int, Action] | None = None
    for k, step in enumerate(fault.ladder):
        here = f"{path}.ladder[{k}]"
        rank = LADDER_ORDER.index(step.action)
        if previous is not None:
            before_k, before = previous
            if step.action is before:
                errors.append(
                    FieldError(
                        f"{here}.action",
                        f"{step.action} appears twice (also ladder[{before_k}]); use `retries`"
                        " to try a step again",
                    )
                )
            elif rank < LADDER_ORDER.index(before):
                errors.append(
                    FieldError(
                        f"{here}.action",
                        f"{step.action} comes after {before} (ladder[{before_k}]); steps go in"
                        f" the order {_ORDER_TEXT} (rungs may be skipped, not reversed)",
                    )
                )
        if previous is None or rank > LADDER_ORDER.index(previous[1]):
            previous = (k, step.action)
        if step.on_pdb_blocked is not None and step.action is not Action.Drain:
            errors.append(
                FieldError(
                    f"{here}.onPDBBlocked",
                    f"applies only to Drain (the only step a PodDisruptionBudget can block),"
                    f" not {step.action}",
                )
            )
        if step.on_timeout is OnTimeout.Force:
            if step.action is not Action.Drain:
                errors.append(
                    FieldError(
                        f"{here}.onTimeout",
                        f"Force applies only to Drain (it deletes pods that could not be"
                        f" evicted); {step.action} can only Escalate",
                    )
                )
            elif step.timeout is None:
                errors.append(
                    FieldError(
                        f"{here}.timeout",
                        "is required with onTimeout: Force (Force happens when the timeout"
                        " runs out)",
                    )
                )
    last = fault.ladder[-1].action
    if last is not Action.Replace and fault.on_exhausted is None:
        errors.append(
            FieldError(
                f"{path}.onExhausted",
                f"is required because the ladder ends in {last}, not Replace: say Hold (keep the"
                " node quarantined until the fault clears) or Fail (close the incident and leave"
                " the node cordoned for a human)",
            )
        )
    return errors


def _budget(budget: Budget, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if budget.schedule is not None and budget.duration is None:
        errors.append(FieldError(f"{path}.duration", "is required with schedule"))
    if budget.duration is not None and budget.schedule is None:
        errors.append(FieldError(f"{path}.schedule", "is required with duration"))
    if (
        budget.schedule is not None
        and budget.duration is not None
        and durations.parse(budget.duration).total_seconds() <= 0
    ):
        errors.append(
            FieldError(f"{path}.duration", "must be longer than 0s: the window would never open")
        )
    for i, action in enumerate(budget.actions):
        if action not in DISRUPTIVE:
            errors.append(
                FieldError(
                    f"{path}.actions[{i}]",
                    f"{action} is not disruptive; budgets limit"
                    f" {', '.join(a for a in LADDER_ORDER if a in DISRUPTIVE)}"
                    " (the circuit breaker limits cordons)",
                )
            )
    return errors


def _selector(selector: LabelSelector, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, requirement in enumerate(selector.match_expressions):
        here = f"{path}.matchExpressions[{i}].values"
        needs_values = requirement.operator in (Operator.IN, Operator.NOT_IN)
        if needs_values and not requirement.values:
            errors.append(FieldError(here, f"is required with operator {requirement.operator}"))
        if not needs_values and requirement.values:
            errors.append(FieldError(here, f"must be empty with operator {requirement.operator}"))
    return errors
