"""Node selector terms matched against a node (``nodeSelectorTerms``: pod node affinity, DRA slices and
allocations), shared by the predicates and the DRA model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kaisched.k8s.objects import NodeSelectorRequirement, NodeSelectorTerm

if TYPE_CHECKING:
    from kaisched.model.node import NodeInfo

__all__ = ["requirement_matches", "term_matches"]


def requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and req.values:
        try:
            lhs, rhs = int(value), int(req.values[0])
        except ValueError:
            return False
        return lhs > rhs if op == "Gt" else lhs < rhs
    return False


def term_matches(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches no objects
    for req in term.match_expressions:
        if not requirement_matches(req, node.labels.get(req.key)):
            return False
    for req in term.match_fields:
        value = node.name if req.key == "metadata.name" else None
        if not requirement_matches(req, value):
            return False
    return True
