"""`--timeline OUT.csv`: every simulated event as one CSV row, for spreadsheets and audits.

A report says what happened in total; the timeline says when and to which node, so a surprising
figure (a replacement, a long block) can be traced to the events behind it.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from typing import TextIO

COLUMNS = ("time", "policy", "event", "node", "detail", "available_nodes", "in_flight")


class Timeline:
    """Writes rows as they happen (no buffering of a whole run in memory)."""

    def __init__(self, stream: TextIO, start: datetime) -> None:
        self._writer = csv.writer(stream, lineterminator="\n")
        self._writer.writerow(COLUMNS)
        self._start = start
        self.rows = 0

    def record(
        self,
        at: float,
        policy: str,
        event: str,
        node: str,
        detail: str,
        available: int,
        in_flight: int,
    ) -> None:
        moment = self._start + timedelta(seconds=at)
        self._writer.writerow(
            (
                moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
                policy,
                event,
                node,
                detail,
                available,
                in_flight,
            )
        )
        self.rows += 1
