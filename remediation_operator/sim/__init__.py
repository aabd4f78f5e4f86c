"""A discrete-event fleet simulator driving the same domain and engine with a manual clock.

Modules: `simulator` (the event loop and the world's side of every action), `study` (several
policies over one fleet and seed; what `remediation-operator simulate` runs), `faultmix` and
`fleetspec` (the YAML inputs, shipped in `data/`), `hosts` (each host's hidden truth and the
conditions its agents publish), `jobs` (gang-scheduled training jobs), `events` (the agenda),
`ledger` (time integrals), `losses` (which stage and fault class each lost node-hour goes
to), `oracle` (the same faults handled perfectly: the baseline of every report), `report`,
`timeline`, `plot`, `invariants` (the operator's promises,
checked after every decision), `spec` (shared YAML readers), and `memory_cluster` (the engine's
ports in memory, shared with the engine's tests).
"""
