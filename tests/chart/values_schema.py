"""`defaultPolicy.spec` in the chart's values.schema.json, generated from the policy models.

Helm validates values against values.schema.json before rendering, so a typo in the default
policy (`mode: Enforcee`, an unknown field) fails `helm install` naming the value instead of
rendering a RemediationPolicy the API server then rejects. The schema is the RemediationPolicy
CRD's `spec` schema, which `remediation_operator.api.crds` builds from the pydantic models (the
same source as crds/), made strict JSON Schema by tests/chart/crd_schema.py. Regenerate with
`python -m tests.chart.values_schema --write`; `make chart-check` (and tests/chart) fail on
drift.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from remediation_operator.api import crds
from tests.chart import crd_schema
from tests.chart.chart_check import CHART

SCHEMA = CHART / "values.schema.json"
COMMAND = "python -m tests.chart.values_schema --write"


def policy_spec_schema() -> dict[str, Any]:
    """The RemediationPolicy `spec` schema from the models, as strict JSON Schema."""
    [crd] = [d for d in crds.definitions() if d["spec"]["names"]["kind"] == "RemediationPolicy"]
    [version] = [v for v in crd["spec"]["versions"] if v.get("storage")]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, Any] = crd_schema.strict(spec)
    schema["description"] = (
        "A RemediationPolicy spec (docs/policy.md); generated from the policy models by "
        f"`{COMMAND}`."
    )
    return schema


def expected(current: dict[str, Any]) -> dict[str, Any]:
    """`current` (the values schema) with defaultPolicy.spec replaced by the generated one."""
    updated: dict[str, Any] = json.loads(json.dumps(current))
    updated["properties"]["defaultPolicy"]["properties"]["spec"] = policy_spec_schema()
    return updated


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chart.values_schema", description=__doc__
    )
    parser.add_argument("--write", action="store_true", help="rewrite values.schema.json")
    args = parser.parse_args(argv)
    current = json.loads(SCHEMA.read_text())
    text = render(expected(current))
    if args.write:
        SCHEMA.write_text(text)
        return 0
    if SCHEMA.read_text() != text:
        print(f"{SCHEMA}: defaultPolicy.spec is stale: run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
