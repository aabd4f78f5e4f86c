"""Tests of the Node hot path: the per-event filter and the node cache.

Real: `engine.nodes` (classification, relevance, views), `handlers.node_cache.NodeCache` and the
`engine.node_index.NodeIndex` it fills. Nothing is faked: these are pure functions and in-memory
objects fed hand-written Node bodies shaped like the API's (and Hypothesis-generated ones,
including malformed ones). `reference_filter` is the relevance filter as it was before it was
rewritten to compare raw values; the new one must answer exactly as it did.
"""
