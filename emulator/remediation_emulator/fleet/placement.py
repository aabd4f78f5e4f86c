"""Which watched objects (pods, pinned Jobs) are bound to which node.

The kubelet and the Job runner both revisit everything bound to a node when the node's
readiness changes (a reboot holds pods and Jobs back). This index answers "what is on node N"
without scanning every object, follows objects that move, and forgets deleted ones in O(1).
"""

from __future__ import annotations


class ByNode:
    def __init__(self) -> None:
        self._keys: dict[str, set[str]] = {}
        self._node_of: dict[str, str] = {}

    def place(self, key: str, node: str | None) -> None:
        """Record that `key` is now on `node` (None: on no node, or gone)."""
        old = self._node_of.get(key)
        if old == node:
            return
        if old is not None:
            members = self._keys[old]
            members.discard(key)
            if not members:
                del self._keys[old]
            del self._node_of[key]
        if node:
            self._node_of[key] = node
            self._keys.setdefault(node, set()).add(key)

    def on(self, node: str) -> set[str]:
        """The keys bound to `node` (a copy: callers may place while iterating)."""
        return set(self._keys.get(node, ()))
