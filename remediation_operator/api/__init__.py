"""The custom resources as pydantic v2 models: the source of truth for the CRDs and their docs.

Also converts validated objects into the domain's values, with errors that name the field.

- `policy`, `remediation`: the models (spec and status of each resource).
- `policy_parsing`: `validate(obj)` and `parse_policy(obj)` / `parse_spec(spec, name=...)`.
- `policy_rules`: the semantic rules (the CRD repeats them as CEL rules where it can).
- `remediation_status`: Remediation status <-> `RemediationState`; `breaker_status`: the policy
  status' circuit map <-> `BreakerState`s; `timestamps`: RFC 3339 times.
- `openapi`, `crds`, `reference_docs`: generate crds/ and docs/policy.md's field reference.
"""
