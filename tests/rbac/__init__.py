"""Proof that the chart's RBAC is least privilege."""
