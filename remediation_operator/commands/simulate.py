"""`remediation-operator simulate`: what a policy would do to a fleet, before you apply it.

Runs the operator's own engine and planner over a simulated fleet (faults calibrated to the
Llama 3 report by default) and prints availability, GPU-hours and job outcomes, actions by type,
replacements, recovery times and time blocked by budgets and the breaker, side by side for
`--compare`. Exit codes: 0 done; 1 an invariant was violated (`--check-invariants`); 2 bad
input (the message names the file and field).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SUMMARY = "Simulate a policy over a GPU fleet and report what it would do (--compare others)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        type=Path,
        required=True,
        metavar="P.yaml",
        help="the RemediationPolicy to simulate",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="Q.yaml",
        help="more policies to run over the same fleet and faults, shown side by side"
        " (baselines: examples/baselines/)",
    )
    parser.add_argument(
        "--fleet", type=Path, metavar="F.yaml", help="the fleet (default: 2,048 nodes of 8 GPUs)"
    )
    parser.add_argument(
        "--fault-mix",
        type=Path,
        metavar="M.yaml",
        help="fault causes, rates and repair odds (default: the shipped Llama 3 mix)",
    )
    parser.add_argument("--days", type=float, default=30.0, help="simulated days (default 30)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run N seeds (--seed, --seed+1, ...) and print the mean, the range and each seed's"
        " headline figures (default 1); --timeline and --plot show the first seed",
    )
    parser.add_argument(
        "--as-enforce",
        action="store_true",
        help="simulate DryRun policies as if in Enforce (DryRun records decisions and acts on"
        " nothing, so its figures are those of no remediation)",
    )
    parser.add_argument("--timeline", type=Path, metavar="OUT.csv", help="write every event")
    parser.add_argument(
        "--plot", type=Path, metavar="OUT.png", help="draw availability and in-flight over time"
    )
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="write the reports as JSON")
    parser.add_argument(
        "--check-invariants",
        action="store_true",
        help="check budgets, breaker and ladder order after every decision (slower)",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from remediation_operator.sim import faultmix, fleetspec, invariants, plot, report, study
    from remediation_operator.sim.spec import SpecError
    from remediation_operator.sim.timeline import Timeline

    try:
        if args.plot is not None:
            plot.require()
        policies = study.policies_from([args.policy, *args.compare])
        if args.as_enforce:
            policies = study.as_enforce(policies)
        the_study = study.Study(
            policies=policies,
            mix=faultmix.load(args.fault_mix),
            fleet=fleetspec.load(args.fleet),
            days=args.days,
            seed=args.seed,
            seeds=args.seeds,
        )
    except (SpecError, plot.PlotUnavailableError) as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    checker = invariants.Checker() if args.check_invariants else None
    try:
        if args.timeline is not None:
            with args.timeline.open("w", encoding="utf-8", newline="") as stream:
                runs = study.run_seeds(
                    the_study, timeline=Timeline(stream, study.START), observer=checker
                )
        else:
            runs = study.run_seeds(the_study, observer=checker)
    except invariants.InvariantViolation as exc:
        print(f"simulate: invariant violated: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"simulate: cannot write {args.timeline}: {exc.strerror}", file=sys.stderr)
        return 2
    per_seed = [[r.report for r in results] for results in runs]
    if len(per_seed) == 1:
        sys.stdout.write(report.format_table(per_seed[0]))
        document: object = [r.to_json() for r in per_seed[0]]
    else:
        sys.stdout.write(report.format_seeds(per_seed))
        document = {
            "seeds": [reports[0].seed for reports in per_seed],
            "reports": [[r.to_json() for r in reports] for reports in per_seed],
        }
    if checker is not None:
        print(f"\ninvariants held at {checker.checks} decisions")
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if args.plot is not None:
        plot.draw(runs[0], args.plot)
    return 0
