"""The ``topology`` plugin (spec 9): which nodes a (sub)group with a topology constraint may use.

A Topology lists node labels from the widest level (zone) to the narrowest (rack, host). A node belongs
to it when it carries every level label; its domain at level i is the values of levels 0..i joined with
``.``. For a (sub)group with a constraint, :meth:`TopologyPlugin.subset_nodes` returns the node sets to try
in order (spec 9.4):

* the candidate nodes' lowest common domain must have room for the tasks, else the job fails;
* domains of the relevant levels (the preferred level, or the required one, up to the required level, or
  up to the whole cluster when only a preference is given) that have room, narrowest level first, and
  within a level in the order of the sorted domain tree (a parent's children by how full the job would make
  them, fullest first: bin-packing);
* with a required level and pods of the job already running, only domains that contain them.

"Room": when every task asks the same kinds of resources, the number of copies of the largest task that fit
on each node, summed over the domain, is at least the number of tasks; otherwise the job's dominant share
of the domain's idle + releasing resources is at most 1 (pod slots ignored, shared-GPU fractions ignored).

With a preferred level, nodes of the preferred-level domains get a score (``floor(10 (i+1) / n) x 10000`` for
the i-th of n domains in sorted order), so that a placement in a wider domain still gathers in one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kaisched.framework.plugin import NodeCandidates, Plugin
from kaisched.framework.session import Session, TopologySubsets
from kaisched.k8s.objects import Topology, TopologyConstraint
from kaisched.model.job import FitError, PodGroupInfo
from kaisched.model.resources import PODS, Vector
from kaisched.model.status import TaskStatus
from kaisched.model.task import TaskInfo

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# pods of a (sub)group placed before this attempt (running, or bound earlier in this cycle): a required
# level keeps the rest of the (sub)group in their domain
PLACED_BEFORE = frozenset({TaskStatus.RUNNING, TaskStatus.BOUND, TaskStatus.BINDING})
TOPOLOGY_SCORE = 10_000.0
MISSING_RESOURCE_RATIO = 1000.0


@dataclass(slots=True)
class _Level:
    label: str
    codes: IntArray  # per node: index of its domain at this level (-1: not in the topology)
    names: list[str]  # domain id ("zone1.spine2") per code
    parent: IntArray  # per domain: its parent's code at the level above (-1 for the first level)


class TopologyTree:
    """The domains of one Topology over the session's nodes."""

    def __init__(self, topology: Topology, node_labels: list[dict[str, str]]) -> None:
        self.name = topology.meta.name
        n = len(node_labels)
        self.member: BoolArray = np.array(
            [all(label in labels for label in topology.levels) for labels in node_labels], dtype=np.bool_)
        self.levels: list[_Level] = []
        prefix = [""] * n
        parent_codes = np.full(n, -1, dtype=np.int64)
        for label in topology.levels:
            index: dict[str, int] = {}
            names: list[str] = []
            parents: list[int] = []
            codes = np.full(n, -1, dtype=np.int64)
            for j in np.flatnonzero(self.member).tolist():
                domain = f"{prefix[j]}.{node_labels[j][label]}" if prefix[j] else node_labels[j][label]
                prefix[j] = domain
                code = index.get(domain)
                if code is None:
                    code = index[domain] = len(names)
                    names.append(domain)
                    parents.append(int(parent_codes[j]))
                codes[j] = code
            self.levels.append(_Level(label, codes, names, np.array(parents, dtype=np.int64)))
            parent_codes = codes

    def level_index(self, label: str) -> int:
        return next((i for i, lv in enumerate(self.levels) if lv.label == label), -1)


def _pod_sets_below(job: PodGroupInfo, sub_group: str) -> list[str]:
    """The pod sets of a (sub)group: the whole job for the root (""), a leaf itself, or a set's leaves."""
    if sub_group in job.pod_sets and sub_group:
        return [sub_group]
    stack = [job.root]
    while stack:
        node = stack.pop()
        if node.name == sub_group:
            return node.all_pod_sets()
        stack.extend(node.children)
    return []


def _where(job: PodGroupInfo, sub_group: str) -> str:
    return f"job <{job.namespace}/{job.name}>" + (f", subgroup {sub_group}" if sub_group else "")


class TopologyPlugin(Plugin):
    name = "topology"

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        nodes = ssn.nodes
        topologies = ssn.snapshot.topologies
        labels = [dict(info.labels) for info in nodes.infos] if topologies else []
        self.trees = {t.meta.name: TopologyTree(t, labels) for t in topologies}
        ssn.subset_nodes = self.subset_nodes
        ssn.add_node_scorer(self.score, neutral=self.neutral)

    # ---- scoring --------------------------------------------------------------------------------
    def neutral(self, task: TaskInfo) -> bool:
        return self.ssn.topology_scores is None

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        scores = self.ssn.topology_scores
        if scores is None:
            return None
        out: Vector = scores[cands.indices]
        return out

    # ---- node sets (spec 9.4) ------------------------------------------------------------------------
    def subset_nodes(self, job: PodGroupInfo, sub_group: str, constraint: TopologyConstraint,
                     tasks: list[TaskInfo], mask: BoolArray) -> TopologySubsets | FitError:
        tree = self.trees.get(constraint.topology)
        if tree is None:
            return FitError("PodSchedulingErrors", f"Requested topology {constraint.topology} does not exist")
        what = "workload" if not sub_group else f"sub-group {sub_group}"
        required = tree.level_index(constraint.required_level) if constraint.required_level else -1
        preferred = tree.level_index(constraint.preferred_level) if constraint.preferred_level else -1
        for kind, label, index in (("required", constraint.required_level, required),
                                   ("preferred", constraint.preferred_level, preferred)):
            if label and index < 0:
                return FitError("PodSchedulingErrors",
                                f"topology constraint error: {what} specified '{label}' as the {kind} topology "
                                f"constraint level, but the topology tree '{tree.name}' does not contain a level "
                                "with this name")
        if required < 0 and preferred < 0:
            return [(mask, None)]
        if preferred >= 0 and required >= 0 and preferred < required:
            preferred = -1  # a preference wider than the requirement says nothing more
        deepest = preferred if preferred >= 0 else required
        requirement = constraint.required_level or constraint.preferred_level
        candidates = mask & tree.member
        room = self._room(tasks, candidates)
        # the lowest common domain of the candidates, no deeper than the preferred (or required) level
        common_level, common_code = -1, -1
        members = np.flatnonzero(candidates)
        for i in range(deepest + 1):
            codes = tree.levels[i].codes[members]
            if len(codes) == 0 or (codes != codes[0]).any():
                break
            common_level, common_code = i, int(codes[0])
        common_mask = candidates
        if not room.fits(common_mask):
            where = tree.levels[common_level].names[common_code] if common_level >= 0 else "the cluster"
            return FitError("PodSchedulingErrors",
                            f"topology {tree.name}, requirement {requirement} couldn't be satisfied for "
                            f"{_where(job, sub_group)}: not enough resources in {where} to allocate the job")
        # sorted domain tree: per level, domains ordered by parent order, then fullest first, then id
        order: list[list[int]] = []
        parent_rank: dict[int, int] = {}
        for i in range(deepest + 1):
            level = tree.levels[i]
            present = np.unique(level.codes[members]) if len(members) else np.zeros(0, dtype=np.int64)
            keyed = sorted(present.tolist(), key=lambda d: (parent_rank.get(int(level.parent[d]), 0)
                                                           if i else 0, -room.ratio((level.codes == d) & candidates),
                                                           level.names[d]))
            order.append(keyed)
            parent_rank = {d: r for r, d in enumerate(keyed)}
        top = required if required >= 0 else -1
        running = [t.node for name in _pod_sets_below(job, sub_group) for t in job.pod_sets[name].tasks
                   if t.status in PLACED_BEFORE and t.node >= 0]
        out: TopologySubsets = []
        for i in range(deepest, top - 1, -1):
            if i < 0:
                out.append((candidates, None))  # the whole cluster, for a preference only
                continue
            level = tree.levels[i]
            for d in order[i]:
                domain = (level.codes == d) & candidates
                if required >= 0 and running and not all(level.codes[n] == d for n in running):
                    continue
                if room.fits(domain):
                    out.append((domain, None))
        if preferred >= 0:
            scores = np.zeros(len(mask))
            level = tree.levels[preferred]
            n_domains = len(order[preferred])
            for rank, d in enumerate(order[preferred]):
                scores[(level.codes == d) & candidates] = np.floor(10 * (rank + 1) / n_domains) * TOPOLOGY_SCORE
            out = [(m, scores) for m, _ in out]
        if not out:
            level_name = tree.levels[top].label if top >= 0 else "the cluster"
            return FitError("PodSchedulingErrors",
                            f"topology {tree.name}, requirement {requirement} couldn't be satisfied for "
                            f"{_where(job, sub_group)}: no {level_name} domain has room for it")
        return out

    def _room(self, tasks: list[TaskInfo], candidates: BoolArray) -> _Room:
        nodes = self.ssn.nodes
        reqs = np.array([t.req for t in tasks], dtype=np.float64)
        reqs[:, PODS] = 0.0
        rows = np.flatnonzero(reqs.sum(axis=0) > 0)
        free = nodes.idle[rows] + nodes.releasing[rows]
        return _Room(reqs[:, rows], free, candidates)


class _Room:
    """Does a set of nodes have room for the tasks (spec 9.4 step 2)?"""

    __slots__ = ("copies", "free", "homogeneous", "n_tasks", "total")

    def __init__(self, reqs: npt.NDArray[np.float64], free: npt.NDArray[np.float64], candidates: BoolArray) -> None:
        self.n_tasks = len(reqs)
        asks = reqs > 0
        self.homogeneous = bool((asks == asks[0]).all()) if len(reqs) else True
        self.total: npt.NDArray[np.float64] = reqs.sum(axis=0)
        self.free = free
        self.copies: npt.NDArray[np.float64] | None
        if self.homogeneous and len(reqs) and asks[0].any():
            largest = reqs.max(axis=0)
            per = np.floor(np.maximum(free[asks[0]], 0.0) / largest[asks[0]][:, None] + 1e-9)
            self.copies = per.min(axis=0)
        else:
            self.copies = None

    def ratio(self, domain: BoolArray) -> float:
        """The job's dominant share of the domain's free resources."""
        if len(self.total) == 0:
            return 0.0
        free = np.maximum(self.free[:, domain].sum(axis=1), 0.0)
        shares = np.where(free > 0, self.total / np.where(free > 0, free, 1.0),
                          np.where(self.total > 0, MISSING_RESOURCE_RATIO, 0.0))
        return float(shares.max())

    def fits(self, domain: BoolArray) -> bool:
        if not domain.any():
            return False
        if self.copies is not None:
            return float(self.copies[domain].sum()) >= self.n_tasks
        return self.ratio(domain) <= 1.0 + 1e-9
