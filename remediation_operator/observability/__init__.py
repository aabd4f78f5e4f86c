"""Structured logs and Prometheus metrics, both fed from the decisions the engine carried out."""
