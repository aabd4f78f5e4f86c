"""Durations are parsed and printed the way users write them in policies."""

from datetime import timedelta

import pytest

from remediation_operator.domain import durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("168h", timedelta(hours=168)),
        ("0s", timedelta(0)),
        ("1.5h", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
    ],
)
def test_parse_accepts_go_style_durations(text: str, expected: timedelta) -> None:
    assert durations.parse(text) == expected


@pytest.mark.parametrize("text", ["", "5", "m5", "5 m", "-5m", "5d", "1h 30m", "five minutes"])
def test_parse_rejects_anything_else_with_an_example(text: str) -> None:
    with pytest.raises(durations.DurationError, match="such as 90s, 5m"):
        durations.parse(text)


@pytest.mark.parametrize("text", ["90s", "5m", "1h30m", "168h", "0s", "250ms", "1h0m5s"])
def test_format_round_trips(text: str) -> None:
    assert durations.parse(durations.format(durations.parse(text))) == durations.parse(text)


def test_format_is_what_a_user_would_write() -> None:
    assert durations.format(timedelta(minutes=90)) == "1h30m"
    assert durations.format(timedelta(seconds=45)) == "45s"
    assert durations.format(timedelta(0)) == "0s"
