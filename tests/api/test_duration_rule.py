"""The CRD's duration rule never hands CEL's `duration()` text it cannot convert.

Kubernetes CEL's `duration()` fails on text Go's time.ParseDuration refuses, and on a sum that
overflows int64 nanoseconds; the API server then reports an internal "type conversion error
from 'string' to 'google.protobuf.Duration'" instead of the rule's message (issue 25). The rule
calls it only on text that matches the pattern and has no part of `SURELY_TOO_LONG`'s size;
these properties show that is enough and that the shortcut refuses only what is over 8760h.
tests/e2e/test_policy_api.py shows the real API server's messages.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from remediation_operator.api import field_types
from remediation_operator.domain import durations

INT64_NANOSECONDS = 2**63 - 1
UNIT_NANOSECONDS = {"h": 3_600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6}
PART = re.compile(r"([0-9]+)(?:\.[0-9]+)?(ms|s|m|h)")

parts = st.tuples(
    st.integers(min_value=0, max_value=10**13).map(str),
    st.sampled_from(["", ".5", ".999999"]),
    st.sampled_from(sorted(UNIT_NANOSECONDS)),
)
texts = st.lists(parts, min_size=1, max_size=10).map(lambda ps: "".join("".join(p) for p in ps))


def whole_nanoseconds(text: str) -> int:
    """The integer parts only (fractions add less than one unit each), as Go sums them."""
    return sum(int(n) * UNIT_NANOSECONDS[u] for n, u in PART.findall(text))


@given(texts)
def test_what_reaches_duration_never_overflows(text: str) -> None:
    if len(text) > field_types.MAX_DURATION_LENGTH:
        return  # maxLength refuses it before any rule runs
    if re.search(field_types.SURELY_TOO_LONG, text):
        return
    parts = PART.findall(text)
    # Each part at most one unit below the next power of ten: the sum stays far from int64.
    assert whole_nanoseconds(text) + len(parts) * 3_600 * 10**9 < INT64_NANOSECONDS


@given(texts)
def test_the_shortcut_refuses_only_what_is_over_the_bound(text: str) -> None:
    if re.search(field_types.SURELY_TOO_LONG, text):
        assert whole_nanoseconds(text) > field_types.MAX_DURATION.total_seconds() * 10**9


def test_the_rule_guards_duration_with_the_pattern_and_the_shortcut() -> None:
    rule = field_types.DURATION_RULE["rule"]
    guard, _, converted = rule.partition("duration(self)")
    assert durations.PATTERN in guard
    assert field_types.SURELY_TOO_LONG in guard
    assert converted.startswith(" <= duration('8760h')")
