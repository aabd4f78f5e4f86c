"""Reason patterns, compiled with RE2: matching time is linear in the reason, whatever the pattern.

A policy's `reason` regex runs against every node condition the operator sees. With a
backtracking engine a pattern such as `(a+)+$` takes exponential time on a reason like
`aaaa...!`, and one such condition stalled the whole process (issue 12, defect 8). RE2 (the
engine Kubernetes CEL uses for `matches()`) guarantees linear time; the price is that it has no
backreferences or lookarounds, and such a pattern is refused when the policy is validated, with
its field path, instead of failing later. The validation and the matcher compile with this one
function, so a pattern that passed validation is the pattern that runs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import re2

ENGINE = "RE2"
"""The regular-expression engine reason patterns use (named in docs and errors)."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is our error to report, not RE2's stderr line


class Pattern(Protocol):
    """What the matcher needs of a compiled pattern."""

    def fullmatch(self, text: str) -> object | None: ...

    def search(self, text: str) -> object | None: ...


class PatternError(ValueError):
    """RE2 cannot compile the pattern; the message says why and what RE2 lacks."""


@lru_cache(maxsize=1024)
def compile(pattern: str) -> Pattern:
    """The pattern compiled by RE2; raise PatternError when RE2 refuses it."""
    try:
        compiled: Pattern = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise PatternError(
            f"{pattern!r} is not a valid {ENGINE} regular expression: {detail}"
            " (RE2 has no backreferences or lookarounds; matching is linear-time)"
        ) from None
    return compiled
