"""Fixtures for the observability tests.

Real: prometheus-client rendering, structlog, and the aiohttp server on 127.0.0.1 (port 0).
Faked: nothing; each test builds its own `Metrics` (own registry), so numbers never leak.
"""
