"""Reconcile one node or policy: read a snapshot through ports, plan, carry out, record.

Owns no loop and no sleep: the caller (kopf handlers, or the simulator) decides when to call.
"""
