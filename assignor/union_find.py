"""Disjoint sets of names: the one union-find of `assignor`.

`parse_scenario` merges declared co-partition groups with it to check their
partition counts; the `PartitionGrouper` merges declared groups and Faust's
rule into the final groups; `streamapp.topic_check` merges an app's sources and
tables before a worker starts. The smaller name becomes a set's root, so roots do
not depend on the order of unions.
"""

from __future__ import annotations

__all__ = ["UnionFind"]


class UnionFind:
    """Sets of names; every name `find` or `union` has seen is in exactly one."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, item: str) -> str:
        """The root of ``item``'s set (``item`` joins as a set of its own if new)."""
        parent = self.parent
        root = parent.setdefault(item, item)
        while root != parent[root]:
            root = parent[root]
        while item != root:  # path compression keeps later finds flat
            parent[item], item = root, parent[item]
        return root

    def union(self, a: str, b: str) -> None:
        """Merge the sets of ``a`` and ``b``."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller name becomes the root: deterministic, whatever the order.
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra

    def sets(self) -> dict[str, list[str]]:
        """Root -> the names of its set, each in the order first seen."""
        members: dict[str, list[str]] = {}
        for item in list(self.parent):
            members.setdefault(self.find(item), []).append(item)
        return members
