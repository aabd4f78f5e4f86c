"""Graduated remediation of GPU nodes: cordon, drain, GPU reset, reboot, replace."""

__version__ = "0.1.0"
