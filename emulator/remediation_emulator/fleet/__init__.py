"""An emulated GPU fleet: the kubelet, node agent and Karpenter a real cluster would run.

The controllers here speak plain HTTP to any Kubernetes API server (list+watch, patches with
the right content types, the Eviction API), so the operator sees the same traffic it would see
on a real cluster, and the fleet can be pointed at one. `fleet.Fleet` runs them together;
`builder.build` creates the nodes, NodeClaims and workloads they look after.
"""
