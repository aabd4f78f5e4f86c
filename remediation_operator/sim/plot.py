"""`--plot OUT.png`: availability and remediations in flight over time, one line per policy.

A table hides when things happened; a storm that drains a zone for twenty minutes shows as a
dip here. matplotlib is an optional extra (`pip install 'remediation-operator[plot]'`), so it
is imported only when a plot is asked for, and its absence is a clear error, not a traceback.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path

from remediation_operator.sim.ledger import Sample
from remediation_operator.sim.simulator import Result

INSTALL_HINT = "pip install 'remediation-operator[plot]' (or pip install matplotlib)"


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def require() -> None:
    """Fail before a long simulation, not after it, when a plot cannot be drawn."""
    if not available():
        raise PlotUnavailableError(
            f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}"
        )


def draw(results: Sequence[Result], path: Path) -> None:
    """Three stacked panels over days, one line per policy: nodes not schedulable-and-healthy
    (log scale: a policy at 2 nodes and one at 20 differ by as much as they should), node-hours
    lost so far (where the policies part ways, and by how much), and nodes in disruptive steps.
    """
    require()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, (top, middle, bottom) = plt.subplots(3, 1, sharex=True, figsize=(10, 8))
    for result in results:
        nodes = result.report.nodes
        days = [s.hours / 24.0 for s in result.samples]
        down = [(1.0 - s.available) * nodes for s in result.samples]
        name = result.report.policy
        top.step(*_daily_means(days, down), label=name, where="post")
        middle.plot(days, list(_cumulative_hours(result.samples, down)), label=name)
        bottom.step(days, [s.in_flight for s in result.samples], label=name, where="post")
    top.set_yscale("symlog", linthresh=0.1)  # log above 0.1 node; zero stays on the axis
    top.set_yticks([0, 0.1, 1, 10, 100, 1000])
    top.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    top.set_ylim(bottom=0)
    top.set_ylabel("nodes not schedulable\nand healthy, daily mean")
    middle.set_ylabel("node-hours lost so far")
    bottom.set_ylabel("nodes in disruptive steps")
    bottom.set_xlabel("day")
    middle.legend(loc="upper left")
    first = results[0].report if results else None
    if first is not None:
        top.set_title(
            f"{first.nodes} nodes x {first.gpus_per_node} GPUs, {first.days:g} days,"
            f" seed {first.seed}"
        )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _daily_means(days: Sequence[float], down: Sequence[float]) -> tuple[list[float], list[float]]:
    """The level averaged over each whole day (samples are evenly spaced): the 10-minute series
    is too busy to compare policies by."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for day, level in zip(days, down, strict=True):
        sums[int(day)] = sums.get(int(day), 0.0) + level
        counts[int(day)] = counts.get(int(day), 0) + 1
    starts = sorted(sums)
    return [float(d) for d in starts], [sums[d] / counts[d] for d in starts]


def _cumulative_hours(samples: Sequence[Sample], down: Sequence[float]) -> Iterator[float]:
    """Node-hours lost up to each sample (each sample's level held until the next one)."""
    total = 0.0
    previous_hours = 0.0
    previous_down = 0.0
    for sample, level in zip(samples, down, strict=True):
        total += previous_down * (sample.hours - previous_hours)
        previous_hours, previous_down = sample.hours, level
        yield total
