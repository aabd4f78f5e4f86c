"""The shipped fault mix matches its source, and a bad mix file says which field is wrong."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation_operator.domain.policy import Action
from remediation_operator.sim import faultmix
from remediation_operator.sim.faultmix import FaultMix
from remediation_operator.sim.spec import SpecError

LLAMA3_COUNTS = {
    "faulty-gpu": 148,
    "gpu-hbm3": 72,
    "software-bug": 54,
    "network-switch-cable": 35,
    "host-maintenance": 32,
    "gpu-sram": 19,
    "gpu-system-processor": 17,
    "nic": 7,
    "nccl-watchdog": 7,
    "silent-data-corruption": 6,
    "gpu-thermal": 6,
    "ssd": 3,
    "power-supply": 3,
    "server-chassis": 2,
    "io-expansion-board": 2,
    "dependency": 2,
    "cpu": 2,
    "system-memory": 2,
}


def test_shipped_mix_reproduces_llama3_table5(mix: FaultMix) -> None:
    assert {c.name: c.count for c in mix.causes} == LLAMA3_COUNTS
    assert sum(LLAMA3_COUNTS.values()) == 419
    assert (mix.hosts, mix.gpus_per_host, mix.days) == (2048, 8, 54)
    # About 3.8 unexpected interruptions per 1,000 host-days (gpu-faults.md).
    assert mix.total_rate_per_host_day * 1000 == pytest.approx(3.79, abs=0.01)


def test_shipped_durations_follow_public_figures(mix: FaultMix) -> None:
    d = mix.durations
    assert d.gpu_reset.low.total_seconds() <= 120 <= d.gpu_reset.high.total_seconds()
    assert (d.reboot.low.total_seconds(), d.reboot.high.total_seconds()) == (600, 1500)
    assert d.replace.low.total_seconds() >= 1800


def test_replacement_always_fixes_and_software_faults_leave_the_node_alone(mix: FaultMix) -> None:
    for cause in mix.causes:
        assert cause.fixed_by[Action.Replace] == 1.0
    software = {c.name for c in mix.causes if not c.persistent}
    assert software == {"software-bug", "nccl-watchdog", "dependency"}


def _shipped() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(faultmix.DEFAULT_PATH.read_text())
    return loaded


def _break(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_shipped())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        (("causes", 0, "fixedBy", "Reboot"), 1.5, "causes[0].fixedBy.Reboot", "probability"),
        (("causes", 1, "fixedBy", "Rebot"), 0.5, "causes[1].fixedBy.Rebot", "unknown field"),
        (("causes", 0, "fixedBy"), _DELETE, "causes[0].fixedBy", "required"),
        (("causes", 2, "count"), -3, "causes[2].count", "at least 0"),
        (("durations", "reboot"), ["25m", "10m"], "durations.reboot", "shorter than min"),
        (("durations", "gpuReset"), "2 minutes", "durations.gpuReset", "not a duration"),
        (("causes", 0, "signals", 0, "condition", "status"), "Maybe", "status", "Unknown"),
        (("basis", "hosts"), 0, "basis.hosts", "at least 1"),
        (("causes", 1, "name"), "faulty-gpu", "causes[1].name", "listed twice"),
    ],
)
def test_a_broken_mix_names_the_field(
    path: tuple[str | int, ...], value: Any, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        faultmix.parse(_break(path, value))
    assert field in caught.value.path
    assert words in str(caught.value)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError, match=r"nope\.yaml: cannot read"):
        faultmix.load(missing)


def test_a_yaml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    broken = tmp_path / "mix.yaml"
    broken.write_text("basis:\n  hosts: [1, 2\ncauses: []\n")
    with pytest.raises(SpecError, match="line"):
        faultmix.load(broken)
