"""`remediation-operator check-policy FILE...`: validate RemediationPolicy YAML offline.

Runs exactly the validation the operator runs (schema, then semantic rules), so a policy is
known good before it reaches a cluster. Prints `FILE: ok`, or one line per error naming the
field. A valid policy also gets `FILE: info: ...` lines for what is easy to get wrong without
being an error: for each `staleAfter` match, what a node that never reported the condition
shows (`whenMissing`). With `--catalog`, every XID and DCGM health code of the GPU fault catalog
(`domain.catalog`), as the node agents publish it, is run through the policy's own matcher:
one line each with the fault it lands in, its ladder and NVIDIA's recommendation. Exit 0 when
all are valid, 1 when any is invalid, 2 when a file cannot be read or is not YAML (with the
line and column). `kubectl get remediationpolicies -o yaml` output (a `List`, or
`RemediationPolicyList`) is checked item by item, and `-` reads standard input, so the policies
running in a cluster can be checked as they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remediation_operator.domain.policy import Policy

SUMMARY = "Validate RemediationPolicy YAML files offline; name every bad field."

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="YAML files (multi-document ok; a kubectl List is checked item by item; - reads"
        " standard input)",
    )
    parser.add_argument(
        "--catalog",
        action="store_true",
        help="also print, for every XID and DCGM health code of the GPU fault catalog as the"
        " node agents publish it, which fault of each valid policy it lands in and with which"
        " ladder, beside what NVIDIA recommends",
    )


def catalog_lines(policy: Policy) -> list[str]:
    """One line per catalog reason: what the policy's own matcher makes of it, beside what
    NVIDIA recommends (`domain.catalog`); `differs` marks a ladder other than the catalog's."""
    from datetime import UTC, datetime

    from remediation_operator.domain import catalog, matching
    from remediation_operator.domain.fleet import Condition, NodeView

    now = datetime.now(UTC)
    rows: list[tuple[str, ...]] = [
        ("catalog", "as published", "NVIDIA", "fault", "ladder", ""),
    ]
    for report in catalog.reports():
        entry = report.entry
        condition = Condition(report.type, report.status, report.reason, report.message)
        found = matching.match(NodeView("catalog", conditions=(condition,)), policy.faults, now)
        ladder = () if found is None else tuple(step.action for step in found.fault.ladder)
        shown = "no action" if found is None else ", ".join(ladder)
        expected = entry.ladder
        differs = "" if ladder == expected else f"differs (catalog: {_ladder(expected)})"
        published = f"{report.type}={report.status} {report.reason}"
        if entry.code == 154:
            published += " (" + report.message.rsplit(" to ", 1)[-1] + ")"
        rows.append(
            (
                f"{entry.kind} {entry.code}",
                published,
                entry.bucket.value,
                "-" if found is None else found.fault.name,
                shown,
                differs,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + ("  " + row[-1] if row[-1] else "")
        for row in rows
    ]


def _ladder(actions: tuple[str, ...]) -> str:
    return ", ".join(actions) if actions else "no action"


def notes(policy: Policy) -> list[str]:
    """Information lines for a valid policy: what each `staleAfter` match makes of a node that
    never reported its condition (issue 12, defect 4: say what a missing condition means)."""
    from remediation_operator.domain import durations
    from remediation_operator.domain.policy import WhenMissing

    lines: list[str] = []
    for i, fault in enumerate(policy.faults):
        for j, match in enumerate(fault.match):
            if match.stale_after is None:
                continue
            where = f"spec.faults[{i}].match[{j}]"
            stale = (
                f"{match.type} with its heartbeat unchanged for"
                f" {durations.format(match.stale_after)} shows fault {fault.name} (weak"
                " evidence: cordon only)"
            )
            if match.when_missing is WhenMissing.Fault:
                missing = (
                    f"a selected node that never reported {match.type} shows it too"
                    " (whenMissing: Fault): every selected node must run the agent that"
                    " publishes it"
                )
            else:
                missing = (
                    f"a node that never reported {match.type} is not faulty (whenMissing:"
                    " Ignore); set whenMissing: Fault if every selected node must report it"
                )
            lines.append(f"info: {where}: {stale}; {missing}")
    return lines


LIST_KINDS = frozenset({"List", "RemediationPolicyList"})
"""What `kubectl get ... -o yaml` prints for several objects: their `items` are the policies."""


def _items(documents: list[object], path: str) -> list[tuple[str, object]]:
    """Each policy document with the label its errors carry: a List's items one by one."""
    expanded: list[tuple[str, object]] = []
    for index, document in enumerate(documents, start=1):
        label = path if len(documents) == 1 else f"{path} (document {index})"
        if isinstance(document, dict) and document.get("kind") in LIST_KINDS:
            items = document.get("items")
            if not isinstance(items, list):
                expanded.append((label, document))  # validated as it is: the error names kind
                continue
            expanded += [(f"{label} (item {i})", item) for i, item in enumerate(items, start=1)]
        else:
            expanded.append((label, document))
    return expanded


def _read(path: str) -> str:
    """The file's text (`-`: standard input), refused unread when larger than the API server
    accepts in one request."""
    import sys

    from remediation_operator.api import input_limits

    limit = input_limits.MAX_FILE_BYTES
    if path == "-":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise _TooLargeError(f"more than {limit} bytes", limit)
        return data.decode("utf-8")
    size = Path(path).stat().st_size
    if size > limit:
        raise _TooLargeError(f"{size} bytes", limit)
    return Path(path).read_text(encoding="utf-8")


class _TooLargeError(Exception):
    def __init__(self, size: str, limit: int) -> None:
        super().__init__(
            f"{size} is more than the API server accepts in one request ({limit}); refused unread"
        )


def _check(path: str, catalog: bool = False) -> tuple[int, list[str]]:
    import yaml

    from remediation_operator.api import input_limits, policy_parsing

    input_limits.allow_deep_documents()
    try:
        text = _read(path)
    except _TooLargeError as exc:
        return EXIT_UNREADABLE, [f"{path}: {exc}"]
    except (OSError, UnicodeDecodeError) as exc:
        return EXIT_UNREADABLE, [f"{path}: cannot read: {exc}"]
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except RecursionError:
        return EXIT_UNREADABLE, [
            f"{path}: nested too deeply to read (more than the API server's 10,000 levels)"
        ]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or str(exc)
        return EXIT_UNREADABLE, [f"{where}: YAML syntax error: {problem}"]
    if not documents:
        return EXIT_INVALID, [f"{path}: no YAML document found"]
    policies = _items(documents, path)
    if not policies:
        return EXIT_INVALID, [f"{path}: the List has no items"]
    lines: list[str] = []
    infos: list[str] = []
    for label, document in policies:
        errors = policy_parsing.validate(document)
        lines += [f"{label}: {error}" for error in errors]
        if not errors:
            policy = policy_parsing.parse_policy(document)
            infos += [f"{label}: {note}" for note in notes(policy)]
            if catalog:
                infos += [f"{label}: {line.rstrip()}" for line in catalog_lines(policy)]
    if lines:
        return EXIT_INVALID, lines
    return EXIT_OK, [f"{path}: ok", *infos]


def run(args: argparse.Namespace) -> int:
    worst = EXIT_OK
    for path in args.files:
        code, lines = _check(path, catalog=args.catalog)
        for line in lines:
            print(line)
        worst = max(worst, code)
    return worst
