"""How every model of the API reads and writes: camelCase on the wire, snake_case in Python.

Spec objects forbid unknown fields, so a typo (`tolerance:` for `tolerate:`) is an error that
names the field instead of a setting silently ignored. Status objects ignore unknown fields, so
an operator can read the status a newer or older version of itself wrote.
Attribute docstrings become field descriptions: in the CRD (`kubectl explain`) and docs/policy.md.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        use_attribute_docstrings=True,
        frozen=True,
    )


class StatusModel(BaseModel):
    model_config = ConfigDict(
        extra="ignore",
        populate_by_name=True,
        alias_generator=to_camel,
        use_attribute_docstrings=True,
        frozen=True,
    )
