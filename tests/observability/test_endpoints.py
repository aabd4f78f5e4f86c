"""The HTTP endpoints kubelet and Prometheus poll."""

from __future__ import annotations

import aiohttp
import pytest

from remediation_operator.observability import endpoints
from remediation_operator.observability.endpoints import Address
from remediation_operator.observability.metrics import Metrics


async def fetch(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers["Content-Type"], await response.text()


async def test_metrics_health_and_readiness() -> None:
    metrics = Metrics()
    metrics.leadership(True)
    ready = False
    async with endpoints.serve(Address("127.0.0.1", 0), metrics, lambda: ready) as served:
        status, kind, body = await fetch(served.url + "/metrics")
        assert status == 200
        assert kind.startswith("text/plain")
        assert "gpuops_remediation_leader 1.0" in body
        assert (await fetch(served.url + "/healthz"))[0] == 200
        assert (await fetch(served.url + "/readyz"))[0] == 503
        ready = True
        assert (await fetch(served.url + "/readyz"))[0] == 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:8080", Address("0.0.0.0", 8080)),
        (":9090", Address("0.0.0.0", 9090)),
        ("[::1]:8080", Address("::1", 8080)),
    ],
)
def test_address_parsing(text: str, expected: Address) -> None:
    assert Address.parse(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", "host:70000"])
def test_bad_address_names_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--metrics-address"):
        Address.parse(text)
