"""Status conditions with metav1.Condition semantics, shared by the runtime and the engine port.

`lastTransitionTime` moves only when the condition's status changes, so `kubectl describe`
tells how long a policy has been invalid or its breaker open, not when we last wrote it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from remediation_operator.api import timestamps


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> list[dict[str, Any]]:
    previous = next((c for c in conditions if c.get("type") == type_), None)
    since = timestamps.format_time(now)
    if previous is not None and previous.get("status") == status:
        since = previous.get("lastTransitionTime") or since
    condition = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }
    return [c for c in conditions if c.get("type") != type_] + [condition]
