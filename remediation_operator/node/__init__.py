"""The node-side program: what the executor Jobs run on a GPU node (`remediation-operator node
reset|reboot|validate|collect`), instead of shell in YAML.

It runs inside a privileged Job pod pinned to the node, with the host's root filesystem
mounted (`--host-root`, /host in the shipped templates). It detects the platform, acts, and
prints one JSON result (also written to the pod's termination message, which the operator
reads into the Remediation's status and Events). It imports neither kopf nor the operator's
engine or domain: it is a small program of its own (import-linter contract in pyproject.toml).
"""
