"""Where each kind the fleet touches lives in the Kubernetes REST API.

Controllers name resources (`resources.NODES`), never URL strings, so the paths the fleet uses
are written once and match what kubectl and client-go send.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str
    """API group; "" for the core group."""
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, name: str | None = None, *, namespace: str | None = None, subresource: str = ""
    ) -> str:
        """The collection (no name) or object URL; namespace=None on a namespaced kind lists
        across all namespaces."""
        parts = [self.base]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
JOBS = Resource("batch", "v1", "jobs", "Job", namespaced=True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
NODECLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)


def key(obj: dict[str, object]) -> str:
    """The cache key client-go uses: `namespace/name`, or `name` for cluster-scoped objects."""
    meta = obj.get("metadata")
    assert isinstance(meta, dict), "a Kubernetes object has metadata"
    name = str(meta["name"])
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def split(cache_key: str) -> tuple[str | None, str]:
    """(namespace, name) from a cache key."""
    namespace, _, name = cache_key.rpartition("/")
    return (namespace or None), name
