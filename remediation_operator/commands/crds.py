"""`remediation-operator crds`: write (or check) the CRDs and the policy field reference.

Both are generated from the API models; `--check` is what CI and the drift test run, so a
model change without regenerated files fails with a diff instead of shipping a stale schema.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

SUMMARY = "Generate the CRDs (and docs/policy.md's field reference) from the API models."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        metavar="DIR",
        help="directory to write the CRD files to; repeat for copies (e.g. the Helm chart's)",
    )
    parser.add_argument(
        "--docs",
        metavar="FILE",
        help="Markdown file whose generated field reference (between markers) to update",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; print a diff and exit 1 when a file differs from the models",
    )


def _diff(path: Path, current: str | None, wanted: str) -> str:
    return "".join(
        difflib.unified_diff(
            (current or "").splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=f"{path} (committed)",
            tofile=f"{path} (generated)",
        )
    )


def run(args: argparse.Namespace) -> int:
    from remediation_operator.api import crds, reference_docs

    if not args.out and not args.docs:
        print("crds: give --out DIR and/or --docs FILE", file=sys.stderr)
        return 2
    wanted: dict[Path, str] = {}
    for directory in args.out:
        for name, content in crds.files().items():
            wanted[Path(directory) / name] = content
    if args.docs:
        path = Path(args.docs)
        try:
            wanted[path] = reference_docs.update(path.read_text(encoding="utf-8"))
        except (OSError, reference_docs.MarkersMissingError) as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
    stale = 0
    for path, content in wanted.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        stale += 1
        if args.check:
            sys.stdout.write(_diff(path, current, content) or f"{path}: missing\n")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            print(f"wrote {path}")
    if args.check and stale:
        print(
            f"{stale} file(s) differ from the models; run `make crds` (remediation-operator crds)",
            file=sys.stderr,
        )
        return 1
    return 0
