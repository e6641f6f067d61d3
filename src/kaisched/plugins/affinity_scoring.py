"""Preferred (soft) affinity scores: node affinity (part of ``predicates``, as the upstream NodeAffinity
plugin KAI runs in-process) and inter-pod affinity (the ``podaffinity`` plugin).

Both follow the upstream Kubernetes scores: the sum of the weights of the preferred terms a node
satisfies (anti-affinity terms subtract), normalised over the candidate nodes to 0..1 and multiplied by
KAI's weight for Kubernetes plugin scores (100,000), so a preference outweighs KAI's own placement scores.
"""

from __future__ import annotations

import numpy as np

from kaisched.framework.plugin import NodeCandidates, Plugin
from kaisched.framework.session import Session
from kaisched.model.node import NodeTable
from kaisched.model.resources import Vector
from kaisched.model.selectors import term_matches
from kaisched.model.status import ACTIVE_USED
from kaisched.model.task import TaskInfo
from kaisched.plugins.predicates import pod_matches_term

K8S_PLUGINS_SCORE = 100_000.0


def normalise(raw: Vector) -> Vector:
    if len(raw) == 0:
        return raw
    lo, hi = float(raw.min()), float(raw.max())
    if hi == lo:
        return np.zeros(len(raw))
    out: Vector = (raw - lo) / (hi - lo) * K8S_PLUGINS_SCORE
    return out


class PreferredNodeAffinityScore:
    def __init__(self, nodes: NodeTable) -> None:
        self.nodes = nodes

    @staticmethod
    def neutral(task: TaskInfo) -> bool:
        aff = task.pod.affinity
        return not (aff and aff.node_affinity and aff.node_affinity.preferred)

    def __call__(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        aff = task.pod.affinity
        preferred = aff.node_affinity.preferred if aff and aff.node_affinity else ()
        if not preferred:
            return None
        infos = self.nodes.infos
        raw = np.array(
            [sum(p.weight for p in preferred if term_matches(p.preference, infos[i])) for i in cands.indices],
            dtype=np.float64,
        )
        return normalise(raw)


class PodAffinityPlugin(Plugin):
    """Preferred inter-pod affinity and anti-affinity terms of the pod being placed."""

    name = "podaffinity"

    def on_session_open(self, ssn: Session) -> None:
        self.nodes = ssn.nodes
        ssn.add_node_scorer(self.score, neutral=self.neutral)

    @staticmethod
    def neutral(task: TaskInfo) -> bool:
        aff = task.pod.affinity
        return aff is None or (not (aff.pod_affinity is not None and aff.pod_affinity.preferred)
                               and not (aff.pod_anti_affinity is not None and aff.pod_anti_affinity.preferred))

    def score(self, task: TaskInfo, cands: NodeCandidates) -> Vector | None:
        aff = task.pod.affinity
        terms = []
        if aff is not None and aff.pod_affinity is not None:
            terms += [(w.weight, w.term) for w in aff.pod_affinity.preferred]
        if aff is not None and aff.pod_anti_affinity is not None:
            terms += [(-w.weight, w.term) for w in aff.pod_anti_affinity.preferred]
        if not terms:
            return None
        infos = self.nodes.infos
        pods = [t for info in infos for t in info.tasks.values() if t.status in ACTIVE_USED and t is not task]
        raw = np.zeros(len(cands.indices))
        for weight, term in terms:
            key = term.topology_key
            domains = {
                v for p in pods if pod_matches_term(term, task.namespace, p)
                and (v := infos[p.node].labels.get(key)) is not None
            }
            if not domains:
                continue
            hit = np.array([infos[i].labels.get(key) in domains for i in cands.indices], dtype=np.bool_)
            raw += weight * hit
        return normalise(raw)
