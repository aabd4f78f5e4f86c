"""What the operator writes is bounded: one rule, in one place (issue 24, D52).

Text copied from the outside world (Node condition messages and reasons, Job and pod
messages, executor output, API error messages) may be as long as the API server accepts: a
900,000-character Job failure message once made a 905 KB Remediation and a 900 KB log line,
and a few such steps exceed what etcd stores (1.5 MiB), after which the incident can no
longer be recorded. So every such string is cut to `TEXT` characters, with a marker saying
how much was cut, before it reaches the domain (and so a status, an Event or a log line);
lists of names copied from the cluster keep `NAMES` entries and say how many more there were.

Step records do not grow with retries: of consecutive attempts of one ladder step only the
first (the rate limit counts first attempts) and the latest (what the step is doing now) are
kept, and `steps_dropped` counts the others. What remains is bounded by the ladder's length:
at most four records per ladder step (first and latest attempt, a Diagnose before it, a
Validate after it), so the largest Remediation stays under `REMEDIATION_BYTES`
(tests/hostile/test_bounds.py builds it).
"""

from __future__ import annotations

from dataclasses import replace

from remediation_operator.domain.fleet import StepObservation
from remediation_operator.domain.policy import Action
from remediation_operator.domain.remediation import StepRecord

TEXT = 1024
"""Characters kept of one string from outside (the length Kubernetes allows an Event's
message, so an Event carries the same text as the status)."""
NAMES = 20
"""Names kept of a list from outside (pods and PodDisruptionBudgets blocking a drain)."""
LOG_TEXT = 4096
"""Characters kept of one log field (a log line quotes status messages whole)."""
REMEDIATION_BYTES = 256 * 1024
"""The largest Remediation (as JSON) the operator can write: a sixth of etcd's default
request limit (1.5 MiB)."""
COMPACTED = frozenset({Action.Cordon, Action.Drain, Action.GPUReset, Action.Reboot, Action.Replace})
"""Retries of these are compacted (a Validate or Diagnose record is its own run: its count
names the next Job)."""


def cut(text: str, limit: int = TEXT) -> str:
    """`text`, or its first characters and ` …[N more characters]` within `limit`."""
    if len(text) <= limit:
        return text
    # The marker names what was cut; its own length depends on that number, so size it for
    # the whole text's length (never shorter than the real one).
    keep = max(limit - len(f" …[{len(text)} more characters]"), 0)
    return text[:keep] + f" …[{len(text) - keep} more characters]"


def same(stored: str, seen: str) -> bool:
    """A stored (cut) text and one seen now (whole) are the same text, as far as stored."""
    return stored == seen or (len(seen) > TEXT and stored == cut(seen))


def names(found: tuple[str, ...]) -> tuple[str, ...]:
    """The first `NAMES` names (each cut), then `…and N more` when there were more."""
    if len(found) <= NAMES and all(len(n) <= TEXT for n in found):
        return found
    kept = tuple(cut(n) for n in found[:NAMES])
    if len(found) > NAMES:
        kept += (f"…and {len(found) - NAMES} more",)
    return kept


def observation(seen: StepObservation) -> StepObservation:
    """A step's observation with its outside text bounded."""
    if len(seen.message) <= TEXT and len(seen.pdbs) <= NAMES and len(seen.blocked_pods) <= NAMES:
        return seen
    return replace(
        seen,
        message=cut(seen.message),
        pdbs=names(seen.pdbs),
        blocked_pods=names(seen.blocked_pods),
    )


def appended(
    steps: tuple[StepRecord, ...], record: StepRecord, dropped: int
) -> tuple[tuple[StepRecord, ...], int]:
    """`steps` with `record` added, and the new count of records dropped: a retry of the same
    ladder step replaces the previous retry (the run's first attempt stays)."""
    if (
        len(steps) >= 2
        and record.action in COMPACTED
        and steps[-1].action is record.action
        and steps[-2].action is record.action
        and steps[-1].outcome is not None
        and steps[-2].attempt < steps[-1].attempt < record.attempt
    ):
        return (*steps[:-1], record), dropped + 1
    return (*steps, record), dropped
