"""The oracle: the least node-time any policy could lose on the same faults.

A policy sees conditions and has to guess: it tolerates in case a fault is transient, tries
the cheapest repair first in case it is enough, waits out probation in case the fault comes
back, and respects budgets in case the signal is wrong. The oracle needs none of that. It
replays the very same fault history (same seed, same fault stream, same per-fault luck of
each repair: `HostFault.luck`) and knows, the moment a fault shows on a node, everything a
policy cannot: whether it is real (storms are ignored), how long a transient one will last,
and which repair will fix it. It then does the cheapest right thing at once:

- a transient fault that clears before the fixing repair would finish: cordon (so no job
  lands on it) and uncordon the moment it clears;
- otherwise cordon, drain, and run the first repair that fixes this fault (GPU reset, reboot,
  or replace, in that order of cost), then return the node at once (no probation).

Repairs take the same durations as in any simulation (the fault mix's cited ranges), so the
gap between a policy's report and the oracle's is what better decisions could still win,
not what faster hardware would. No budget, breaker or rate limit applies to the oracle. A
fault no agent shows (silent data corruption) is out of every policy's reach, the oracle's
included: it waits for the same human, so that loss is not counted as avoidable.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from remediation_operator.domain.policy import Action, Policy
from remediation_operator.sim import losses
from remediation_operator.sim import report as reports
from remediation_operator.sim.faultmix import FIXING_ACTIONS, Cause, FaultMix, Symptom
from remediation_operator.sim.fleetspec import FleetSpec
from remediation_operator.sim.hosts import Host
from remediation_operator.sim.simulator import SAMPLE_EVERY, START, Simulation, Work
from remediation_operator.sim.spec import Range
from remediation_operator.sim.timeline import Timeline

NAME = "oracle"
"""The oracle's column in a report (no RemediationPolicy may be named this and compared:
`Study` refuses duplicate names)."""


class Oracle(Simulation):
    """The fleet of a `Simulation`, with perfect, instant decisions instead of the operator."""

    def __init__(
        self,
        *,
        mix: FaultMix,
        fleet: FleetSpec,
        days: float,
        seed: int,
        timeline: Timeline | None = None,
        sample_every: timedelta = SAMPLE_EVERY,
        start: datetime = START,
    ) -> None:
        super().__init__(
            Policy(name=NAME, faults=()),
            mix=mix,
            fleet=fleet,
            days=days,
            seed=seed,
            timeline=timeline,
            sample_every=sample_every,
            start=start,
        )
        self._doing: dict[int, losses.Stage] = {}
        """What the oracle is doing with each slot it took out of service."""

    # The engine is not used: nothing to reconcile --------------------------------------------

    async def _reconcile(self, touched: object) -> None:
        self._dispatch()

    # Decisions ---------------------------------------------------------------------------------

    async def _apply_fault(
        self,
        host: Host,
        cause: Cause,
        symptom: Symptom | None,
        transient: bool,
        lasts: float,
        manual: float,
        luck: tuple[tuple[Action, float], ...] = (),
    ) -> None:
        await super()._apply_fault(host, cause, symptom, transient, lasts, manual, luck)
        self._decide(host)

    def right_action(self, host: Host) -> Action:
        """The cheapest repair that fixes the host's current fault (Replace always does)."""
        fault = host.fault
        assert fault is not None
        for action in FIXING_ACTIONS:
            draw = fault.draw_for(action)
            chance = fault.cause.fixed_by.get(action, 0.0)
            if action is Action.Replace or (draw is not None and draw < chance):
                return action
        return Action.Replace

    def expected_seconds(self, action: Action) -> float:
        """Mean time the repair keeps the slot out of service (the fault mix's ranges)."""
        durations = self.mix.durations
        if action is Action.GPUReset:
            return _mean(durations.gpu_reset)
        if action is Action.Reboot:
            return _mean(durations.reboot)
        return max(_mean(durations.drain), _mean(durations.replace))

    def _decide(self, host: Host) -> None:
        fault = host.fault
        if fault is None or fault.symptom is None or host.slot in self._doing:
            return  # nothing shows a silent fault: no policy can act on it
        action = self.right_action(host)
        self.opened += 1
        self._cordon(host)
        if fault.clears_at is not None and (
            fault.clears_at - self.now <= self.expected_seconds(action)
        ):
            self._doing[host.slot] = losses.Stage.TransientWait
            self._log("oracle", host.name, "waits for the transient fault to clear")
            self._refresh(host)
            return
        self.actions[Action.Drain] += 1
        self._interrupt(host.slot, by_remediation=True)
        self.actions[action] += 1
        self._log("oracle", host.name, f"{action}")
        rng = self._rng_actions
        durations = self.mix.durations
        if action is Action.GPUReset:
            self._doing[host.slot] = losses.Stage.Reset
            self._later(host, Work.GPUReset, durations.gpu_reset.draw(rng).total_seconds())
        elif action is Action.Reboot:
            self._doing[host.slot] = losses.Stage.Reboot
            host.rebooting = True
            self._publish(host)
            self._later(host, Work.Reboot, durations.reboot.draw(rng).total_seconds())
        else:
            self._doing[host.slot] = losses.Stage.Replacement
            host.replacing = True
            self.replacements += 1
            gone = durations.drain.draw(rng).total_seconds()
            back = max(gone, durations.replace.draw(rng).total_seconds())
            self._later(host, Work.MachineGone, gone)
            self._later(host, Work.SuccessorJoins, back)
        self._refresh(host)

    def _cordon(self, host: Host) -> None:
        self.actions[Action.Cordon] += 1
        host.unschedulable = True
        self._refresh(host)

    def _give_back(self, host: Host) -> None:
        self._doing.pop(host.slot, None)
        host.unschedulable = False
        self._refresh(host)
        self._dispatch()

    # The world's answers -----------------------------------------------------------------------

    async def _executor_done(self, host: Host, action: Action) -> None:
        if action is Action.Reboot:
            host.rebooting = False
            host.boot += 1
            host.published.pop("Ready", None)
        fixed = self._judge(host, action)
        self._log("action-done", host.name, f"{action} {'fixed the fault' if fixed else 'done'}")
        self._publish(host)
        self._doing.pop(host.slot, None)
        if host.fault is None:
            self._give_back(host)
        else:  # cannot happen with the right action; stay correct if the mix changes
            self._decide(host)

    async def _fault_ends(self, slot: int, fault_id: int, manual: bool) -> None:
        await super()._fault_ends(slot, fault_id, manual)
        host = self.hosts[slot]
        if self._doing.get(slot) is losses.Stage.TransientWait and host.fault is None:
            self._give_back(host)

    def _successor_joins(self, host: Host) -> None:
        self._doing.pop(host.slot, None)
        super()._successor_joins(host)

    def _report(self) -> reports.Report:
        return replace(super()._report(), oracle=True)

    def _stage_of(self, host: Host) -> losses.Stage:
        if not host.present or host.replacing:
            return losses.Stage.Replacement
        doing = self._doing.get(host.slot)
        if doing is not None:
            return doing
        return super()._stage_of(host)


def _mean(span: Range) -> float:
    return (span.low + span.high).total_seconds() / 2.0
