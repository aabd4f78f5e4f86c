"""The only package that talks to the Kubernetes API (nodes, eviction, jobs, NodeClaims, events)."""
