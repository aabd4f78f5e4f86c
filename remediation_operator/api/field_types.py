"""The string formats policies use (durations, regexes, counts, cron, names), as pydantic types.

Each type validates with the same parser the operator runs later, so a policy that passes
`check-policy` is one the planner can use, and carries the schema the CRD enforces for it
(patterns, length bounds and CEL rules where they exist), so `kubectl apply` rejects what it
can before we ever see it. Every type is bounded (docs/decisions.md D15).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

from remediation_operator.api import timestamps
from remediation_operator.domain import durations, patterns, schedule
from remediation_operator.domain.reasons import Reason

MAX_NODE_COUNT = 100_000
"""The largest node count a policy may give (far above any cluster's size limit)."""

COUNT_OR_PERCENT_PATTERN = r"^((100|[0-9]{1,2})%|100000|[0-9]{1,5})$"
"""A node count (`3`, at most 100000) or a percentage of the selected nodes (`10%`);
Karpenter's budget shape."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


MAX_DURATION = timedelta(hours=8760)
"""The longest duration a policy may give (365 days). Longer is a mistake, not a policy; the
bound also keeps every computed instant (`now + duration`) far inside datetime's range."""

MAX_DURATION_TEXT = "8760h"

MAX_DURATION_LENGTH = 32
"""At most this many characters (`8759h59m59.999s` is 15): a bound the API server checks too."""

_NUMBER_AT_START = r"(^|[hms])0*[1-9]"
SURELY_TOO_LONG = "|".join(
    (
        _NUMBER_AT_START + r"[0-9]{4,}(\.[0-9]+)?h",  # 10000h and more
        _NUMBER_AT_START + r"[0-9]{6,}(\.[0-9]+)?m([0-9]|$)",  # 1000000m (not ms)
        _NUMBER_AT_START + r"[0-9]{8,}(\.[0-9]+)?s",  # 100000000s
        _NUMBER_AT_START + r"[0-9]{11,}(\.[0-9]+)?ms",  # 100000000000ms
    )
)
"""A duration with one part this large is over MAX_DURATION whatever the rest says. Below these
sizes no sum of parts that fits in MAX_DURATION_LENGTH characters overflows Go's int64
nanoseconds, so `duration()` never fails on text the pattern admits."""

DURATION_RULE = {
    "rule": (
        f"!self.matches(r'{durations.PATTERN}') || (!self.matches(r'{SURELY_TOO_LONG}')"
        f" && duration(self) <= duration('{MAX_DURATION_TEXT}'))"
    ),
    "message": f"must be at most {MAX_DURATION_TEXT} (365 days)",
}
"""The CEL rule the CRD carries for every duration (Kubernetes CEL's `duration()` reads Go
duration text, of which our pattern is a subset). It calls `duration()` only on text that it
can convert: a conversion error would be reported as a second, internal message
("type conversion error from 'string' to 'google.protobuf.Duration'") next to the pattern's
own, and for an overflowing number (24000000000h) instead of "must be at most 8760h"."""

MAX_REGEX_LENGTH = 1024

REGEX_RULE = {
    "rule": "''.matches(self) || !''.matches(self)",
    "message": "must be a valid RE2 regular expression (no backreferences or lookarounds)",
}
"""The CRD's check that a reason pattern compiles: CEL's `matches()` compiles its argument with
Go's regexp, which implements RE2's syntax, and a pattern that does not compile makes the rule
fail with the parser's message (either operand raises, so `||` cannot absorb the error). The
operator's own check (google-re2) stays the authority for the rare pattern the two disagree on."""


def _duration(text: str) -> str:
    if len(text) > MAX_DURATION_LENGTH:
        raise ValueError(
            f"is {len(text)} characters long; a duration is at most {MAX_DURATION_LENGTH}"
            f" (and at most {MAX_DURATION_TEXT})"
        )
    try:
        value = durations.parse(text)
    except OverflowError:
        value = None
    if value is None or value > MAX_DURATION:
        raise ValueError(f"{text!r} is longer than the maximum {MAX_DURATION_TEXT} (365 days)")
    return text


def _regex(text: str) -> str:
    if not text:
        raise ValueError("is empty; leave `reason` out to accept any reason")
    if len(text) > MAX_REGEX_LENGTH:
        raise ValueError(f"is {len(text)} characters long; at most {MAX_REGEX_LENGTH}")
    try:
        patterns.compile(text)
    except patterns.PatternError as exc:
        raise ValueError(str(exc)) from None
    return text


MAX_CRON_LENGTH = 128


_CRON_MACROS = ("yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly")
_CRON_FIELDS = (
    # (field, its numbers without leading zeros, its names, whether `?` is allowed)
    ("minute", "[0-9]|[1-5][0-9]", "", False),
    ("hour", "[0-9]|1[0-9]|2[0-3]", "", False),
    ("day-of-month", "[1-9]|[12][0-9]|3[01]", "", True),
    ("month", "[1-9]|1[0-2]", "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC", False),
    ("day-of-week", "[0-7]", "SUN|MON|TUE|WED|THU|FRI|SAT", True),
)


def _cron_pattern() -> str:
    """What `schedule.parse` accepts, as far as a regular expression can say it: 5 fields of
    lists, ranges, steps and names, each number within its field's range, or a macro. (A
    backwards range, or a day no listed month has, still passes here; the operator refuses
    those.) Go's regexp (the API server's) reads it as Python's `re` does."""
    fields = []
    for _, digits, names, question in _CRON_FIELDS:
        value = f"0*({digits})" + (f"|{names}" if names else "")
        star = r"\*|\?" if question else r"\*"
        item = f"({star}|({value})(-({value}))?)(/0*[1-9][0-9]*)?"
        fields.append(f"{item}(,{item})*")
    spaced = r"\s+".join(fields)
    macros = "|".join(_CRON_MACROS)
    return rf"(?i)^\s*(@({macros})|{spaced})\s*$"


CRON_PATTERN = _cron_pattern()


def _cron(text: str) -> str:
    if len(text) > MAX_CRON_LENGTH:
        raise ValueError(f"is {len(text)} characters long; a schedule is at most {MAX_CRON_LENGTH}")
    schedule.parse(text)
    return text


def _dns_label(text: str) -> str:
    if len(text) > 63 or not re.match(DNS_LABEL_PATTERN, text):
        shown = text if len(text) <= 80 else text[:80] + "..."
        raise ValueError(
            f"{shown!r} is not a DNS label: use at most 63 lower-case letters, digits and '-',"
            " starting and ending with a letter or digit"
        )
    return text


def _timestamp(text: str) -> str:
    timestamps.parse_time(text)
    return text


def _count_or_percent(value: Any) -> str:
    """Keep the value as text (`"3"`, `"10%"`) as the domain does; ints become their digits."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is neither a node count nor a percentage such as '10%'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative; a node count is 0 or more")
        if value > MAX_NODE_COUNT:
            raise ValueError(f"{value} is more than the maximum node count {MAX_NODE_COUNT}")
        return str(value)
    if len(value) > 8 or not re.match(COUNT_OR_PERCENT_PATTERN, value):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise ValueError(
            f"{shown!r} is neither a node count (such as 3, at most {MAX_NODE_COUNT}) nor a"
            " percentage from 0% to 100%"
        )
    return value


Duration = Annotated[
    str,
    AfterValidator(_duration),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": durations.PATTERN,
            "maxLength": MAX_DURATION_LENGTH,
            "x-kubernetes-validations": [DURATION_RULE],
        }
    ),
]
"""Go-style duration text: `90s`, `5m`, `1h30m`, `168h`; at most 8760h."""

RecordedDuration = Annotated[
    str,
    WithJsonSchema(
        {"type": "string", "pattern": durations.PATTERN, "maxLength": MAX_DURATION_LENGTH}
    ),
]
"""A duration the operator records in a status (a step's timeout): the same text as
`Duration`, without its CEL rule. A CEL rule on a field of `status.steps[]` (a list the API
server cannot bound) costs more than a CRD's whole validation budget: the real kube-apiserver
refuses the CRD ("estimated rule cost exceeds budget"). The operator wrote it from a policy
that passed `Duration`'s checks."""

Regex = Annotated[
    str,
    AfterValidator(_regex),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_REGEX_LENGTH,
            "x-kubernetes-validations": [REGEX_RULE],
        }
    ),
]
"""An RE2 regular expression (linear-time matching; no backreferences or lookarounds),
matched against the whole value."""

CronSchedule = Annotated[
    str,
    AfterValidator(_cron),
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": MAX_CRON_LENGTH,
            "x-kubernetes-validations": [
                {
                    # A rule rather than `pattern`, so the API server's refusal says what is
                    # wrong instead of quoting a 1,500-character regular expression.
                    "rule": f"self.matches(r'{CRON_PATTERN}')",
                    "message": "must be 5 cron fields (minute 0-59, hour 0-23, day-of-month"
                    " 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT) or a macro such"
                    " as @daily",
                }
            ],
        }
    ),
]
"""A 5-field cron expression or macro such as `@daily`, evaluated in UTC."""

DnsLabel = Annotated[
    str,
    AfterValidator(_dns_label),
    WithJsonSchema({"type": "string", "pattern": DNS_LABEL_PATTERN, "maxLength": 63}),
]

CountOrPercent = Annotated[
    str,
    BeforeValidator(_count_or_percent),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": COUNT_OR_PERCENT_PATTERN,
            "minimum": 0,
            "maximum": MAX_NODE_COUNT,
            "maxLength": 8,
        }
    ),
]
"""An integer node count, or a string count or percentage (`"10%"`), kept as text."""

Timestamp = Annotated[
    str,
    AfterValidator(_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""An RFC 3339 time (`2026-11-30T11:02:00Z`); see `timestamps`."""

REASON_PATTERN = r"^[A-Z][A-Za-z0-9]*$"

ReasonWord = Annotated[
    Reason,
    WithJsonSchema({"type": "string", "pattern": REASON_PATTERN}),
]
"""A `Reason`. The CRD only asks for one CamelCase word, so adding a reason (the vocabulary is
append-only) needs no CRD change and an older CRD accepts a newer operator's statuses."""


def _job_template(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A Job template the executor can run: a batch/v1 Job manifest (`spec.template`), a Job
    spec (`template`) or a pod template (`spec.containers`), as `k8s.executors` accepts them,
    whose pod has at least one container with a name and an image."""
    if value is None:
        return None
    if value.get("kind") not in (None, "Job") or value.get("apiVersion") not in (None, "batch/v1"):
        raise ValueError(
            f"is a {value.get('apiVersion')}/{value.get('kind')}, not a batch/v1 Job template"
        )
    spec = value.get("spec")
    if isinstance(spec, dict) and "template" in spec:
        pod, where = spec.get("template"), "spec.template.spec.containers"
    elif "template" in value:
        pod, where = value.get("template"), "template.spec.containers"
    elif isinstance(spec, dict) and "containers" in spec:
        pod, where = value, "spec.containers"
    else:
        raise ValueError(
            "is not a Job template: give a batch/v1 Job manifest (spec.template.spec.containers),"
            " a Job spec (template.spec.containers) or a pod template (spec.containers)"
        )
    pod_spec = pod.get("spec") if isinstance(pod, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if not isinstance(containers, list) or not containers:
        raise ValueError(f"{where}: must list at least one container")
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            raise ValueError(f"{where}[{i}]: must be a container (a mapping)")
        for key in ("name", "image"):
            if not isinstance(container.get(key), str) or not container.get(key):
                raise ValueError(f"{where}[{i}].{key}: is required")
    return value


JobTemplate = Annotated[dict[str, Any] | None, AfterValidator(_job_template)]
"""A free-form Job template (preserve-unknown-fields in the CRD) that must still be a Job."""


def _positive_duration(text: str) -> str:
    if durations.parse(text) <= timedelta(0):
        raise ValueError(f"{text!r} must be longer than 0s (a Job cannot finish in no time)")
    return text


PositiveDuration = Annotated[Duration, AfterValidator(_positive_duration)]
"""A `Duration` that must be longer than zero."""


def _step_timeout(text: str) -> str:
    if durations.parse(text) <= timedelta(0):
        raise ValueError(
            f"{text!r} must be longer than 0s (a step cannot finish in no time); leave timeout"
            " out for no limit"
        )
    return text


StepTimeout = Annotated[Duration, AfterValidator(_step_timeout)]
"""A ladder step's `timeout`: longer than zero (0s would fail every step as it starts)."""

PVC_SCHEME = "pvc://"
HOSTPATH_SCHEME = "hostpath://"
"""A directory on the node itself (`hostpath:///var/log/gpu-diagnostics`), kept per node."""
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _destination(text: str) -> str:
    """`pvc://<claim>[/<dir>]` with a valid claim name and no `.`/`..` segments, or another
    `<scheme>://<where>` address with something after the scheme."""
    scheme, sep, rest = text.partition("://")
    if not sep or not scheme or not re.match(r"^[a-z][a-z0-9+.-]*$", scheme):
        raise ValueError(f"{text!r} is not an address: use pvc://<claim>[/<dir>] or s3://...")
    if not rest.strip("/"):
        raise ValueError(f"{text!r} names no place after {scheme}://")
    if text.startswith(PVC_SCHEME):
        claim, _, sub = rest.partition("/")
        if len(claim) > 253 or not _CLAIM.match(claim):
            raise ValueError(
                f"{text!r}: {claim!r} is not a PersistentVolumeClaim name (lower-case letters,"
                " digits, '-' and '.')"
            )
        if any(part in (".", "..") for part in sub.split("/")):
            raise ValueError(f"{text!r}: the directory must not contain '.' or '..' segments")
    if text.startswith(HOSTPATH_SCHEME) and any(p in (".", "..") for p in rest.split("/")):
        raise ValueError(f"{text!r}: the directory must not contain '.' or '..' segments")
    return text


Destination = Annotated[str, AfterValidator(_destination)]
"""Where diagnostics go (see `Diagnostics.destination`)."""
