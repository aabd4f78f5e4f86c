"""Fault injection: make chosen requests fail, slow down, or have their watch dropped.

Rules are checked before a request touches any state, so an injected error changes nothing,
exactly like a request rejected by a real server (or lost by a flaky network) would. A rule
matches on verb/resource/subresource/namespace/name (None = any) and fires for a number of
times or with a probability (seeded, so a failing test replays).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Rule:
    verb: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    code: int | None = None
    """HTTP status to answer (with a matching Status body) instead of serving the request."""
    delay: float = 0.0
    """Seconds to wait before serving (or failing) the request."""
    drop_watch_after: int | None = None
    """For watches: close the stream after this many events (0 = right after it opens)."""
    times: int | None = None
    """How many matching requests fire the rule (None = unlimited)."""
    rate: float = 1.0
    """Probability that a matching request fires the rule."""
    message: str = ""
    fired: int = field(default=0, init=False)

    def matches(
        self, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
            and (self.subresource is None or self.subresource == subresource)
            and (self.namespace is None or self.namespace == namespace)
            and (self.name is None or self.name == name)
            and (self.times is None or self.fired < self.times)
        )


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    return _REASONS.get(code, "")


class Faults:
    """The rule set consulted for every request (`api.faults`)."""

    def __init__(self, seed: int = 0) -> None:
        self.rules: list[Rule] = []
        self._random = random.Random(seed)

    def add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def error(
        self,
        code: int,
        *,
        times: int | None = 1,
        rate: float = 1.0,
        message: str = "",
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> Rule:
        """Answer matching requests with `code` (default: only the next one)."""
        return self.add(
            Rule(
                verb,
                resource,
                subresource,
                namespace,
                name,
                code=code,
                times=times,
                rate=rate,
                message=message,
            )
        )

    def delay(
        self,
        seconds: float,
        *,
        times: int | None = None,
        rate: float = 1.0,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> Rule:
        return self.add(
            Rule(
                verb, resource, subresource, namespace, name, delay=seconds, times=times, rate=rate
            )
        )

    def drop_watch(
        self,
        *,
        after_events: int = 0,
        times: int | None = 1,
        rate: float = 1.0,
        resource: str | None = None,
        namespace: str | None = None,
    ) -> Rule:
        """Close the next matching watch stream(s) after `after_events` events."""
        return self.add(
            Rule(
                "watch",
                resource,
                None,
                namespace,
                None,
                drop_watch_after=after_events,
                times=times,
                rate=rate,
            )
        )

    def clear(self) -> None:
        self.rules.clear()

    def match(
        self, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> list[Rule]:
        """The rules that fire for this request (counting them as fired)."""
        fired = []
        for rule in self.rules:
            if rule.matches(verb, resource, subresource, namespace, name) and (
                rule.rate >= 1.0 or self._random.random() < rule.rate
            ):
                rule.fired += 1
                fired.append(rule)
        return fired
