"""Fleet settings: profiles are sane and bad values are refused with the field named."""

from __future__ import annotations

import pytest

from remediation_emulator.fleet.config import PROFILES, ConfigError, FleetConfig


def test_profiles_order_their_timings_from_fast_to_realistic() -> None:
    fast, demo, real = PROFILES["fast"], PROFILES["demo"], PROFILES["realistic"]
    assert fast.reboot_duration < demo.reboot_duration < real.reboot_duration
    assert real.reboot_duration == 1200.0  # about 20 minutes for an 8-GPU node
    assert real.heartbeat_period == 300.0  # the EKS agent's 5-minute heartbeat


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reboot_duration": -1.0}, "reboot_duration: must not be negative"),
        ({"reset_clears": 1.5}, "reset_clears: a probability is at most 1"),
        ({"heartbeat_period": 0.0}, "heartbeat_period: must be greater than 0"),
        ({"workers": 0}, "workers: must be at least 1"),
    ],
)
def test_bad_values_are_refused(change: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FleetConfig().with_(**change)
