"""`--plot OUT.png`: availability and remediations in flight over time, one line per policy.

A table hides when things happened; a storm that drains a zone for twenty minutes shows as a
dip here. matplotlib is an optional extra (`pip install 'remediation-operator[plot]'`), so it
is imported only when a plot is asked for, and its absence is a clear error, not a traceback.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

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
    """Two stacked panels: fleet availability (%) and nodes in disruptive steps, over days."""
    require()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    for result in results:
        days = [s.hours / 24.0 for s in result.samples]
        name = result.report.policy
        top.plot(days, [s.available * 100.0 for s in result.samples], label=name, linewidth=1)
        bottom.step(days, [s.in_flight for s in result.samples], label=name, where="post")
    top.set_ylabel("nodes schedulable and healthy (%)")
    bottom.set_ylabel("nodes in disruptive steps")
    bottom.set_xlabel("day")
    top.legend(loc="lower left")
    first = results[0].report if results else None
    if first is not None:
        top.set_title(
            f"{first.nodes} nodes x {first.gpus_per_node} GPUs, {first.days:g} days,"
            f" seed {first.seed}"
        )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
