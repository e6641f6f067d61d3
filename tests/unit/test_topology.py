"""Topology-aware scheduling and hierarchical PodGroups (spec 9, 2.2, 2.4)."""

from __future__ import annotations

from typing import Any

from kaisched import schedule

from .builders import NOW, binds, node, pod, pod_group, queue, status

Obj = dict[str, Any]
RACK = "example.com/rack"
SPINE = "example.com/spine"
SUBGROUP = "kai.scheduler/subgroup-name"


def topology(name: str = "dc", levels: tuple[str, ...] = (SPINE, RACK)) -> Obj:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


def rack_node(name: str, rack: str, spine: str = "s1", gpus: int = 4) -> Obj:
    return node(name, gpus, labels={RACK: rack, SPINE: spine})


def constraint(required: str = "", preferred: str = "", topo: str = "dc") -> dict[str, str]:
    c = {"topology": topo}
    if required:
        c["requiredTopologyLevel"] = required
    if preferred:
        c["preferredTopologyLevel"] = preferred
    return c


def gang(name: str, n: int, gpus: int = 1, *, q: str = "q", topo: dict[str, str] | None = None,
         sub_groups: list[Obj] | None = None, pod_sub_groups: list[str] | None = None,
         min_member: int | None = None, priority_class: str = "train") -> list[Obj]:
    pg = pod_group(name, queue=q, min_member=n if min_member is None else min_member, priority_class=priority_class)
    if topo is not None:
        pg["spec"]["topologyConstraint"] = topo
    if sub_groups is not None:
        pg["spec"]["subGroups"] = sub_groups
    pods = []
    for i in range(n):
        labels = {SUBGROUP: pod_sub_groups[i]} if pod_sub_groups else None
        pods.append(pod(f"{name}-{i}", group=name, gpus=gpus, labels=labels))
    return [pg, *pods]


def run(*objs: Obj | list[Obj], config: Any = None) -> Any:
    flat: list[Obj] = []
    for o in objs:
        flat.extend(o if isinstance(o, list) else [o])
    return schedule(flat, config, NOW)


def racks_of(result: Any, job: str, nodes: dict[str, str]) -> set[str]:
    return {nodes[n] for p, n in binds(result).items() if p.startswith(f"default/{job}-")}


FOUR_RACKS = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2", "n5": "r3", "n6": "r3", "n7": "r4", "n8": "r4"}


def four_racks() -> list[Obj]:
    return [rack_node(n, r, "s1" if r in ("r1", "r2") else "s2") for n, r in FOUR_RACKS.items()]


# ----------------------------------------------------------------------------------------------- input
def test_topology_objects_are_validated() -> None:
    bad = [
        {**topology("empty"), "spec": {"levels": []}},
        topology("dup", (RACK, RACK)),
        topology("host", ("kubernetes.io/hostname", RACK)),
        {**topology("old"), "apiVersion": "kueue.x-k8s.io/v1alpha1"},
    ]
    result = run(node("n1"), queue("q"), *bad, topology("ok"))
    fields = {(e.object, e.field) for e in result.errors}
    assert fields == {("Topology empty", "spec.levels"), ("Topology dup", "spec.levels[1].nodeLabel"),
                      ("Topology host", "spec.levels"), ("Topology old", "apiVersion")}


def test_unknown_topology_and_unknown_level_keep_the_job_pending_with_a_reason() -> None:
    result = run(*four_racks(), queue("q"), topology(), gang("a", 2, topo=constraint(RACK, topo="nope")),
                 gang("b", 2, topo=constraint("example.com/zone")))
    assert status(result, "a").message == "Requested topology nope does not exist"
    assert "specified 'example.com/zone' as the required topology constraint level, but the topology tree 'dc' " \
           "does not contain a level with this name" in status(result, "b").message
    assert not result.binds


# ------------------------------------------------------------------------------------------- required
def test_required_level_keeps_the_gang_in_one_rack_fullest_first() -> None:
    running = [pod_group("busy", queue="q"), pod("busy-0", group="busy", gpus=3, node="n3")]
    result = run(*four_racks(), queue("q"), topology(), *running, gang("job", 4, topo=constraint(RACK)))
    # r2 has 5 GPUs free (fullest that fits 4), r1/r3/r4 have 8
    assert racks_of(result, "job", FOUR_RACKS) == {"r2"}
    assert len(binds(result)) == 4


def test_required_level_that_no_domain_can_hold_never_splits_the_gang() -> None:
    result = run(*four_racks(), queue("q"), topology(), gang("big", 9, topo=constraint(RACK)))
    assert not result.binds
    pending = status(result, "big")
    assert pending.reason == "PodSchedulingErrors"
    assert pending.message.startswith(f"topology dc, requirement {RACK} couldn't be satisfied for job <default/big>")
    # without the constraint the 9 pods fit across racks
    assert len(binds(run(*four_racks(), queue("q"), gang("big", 9)))) == 9


def test_required_spine_lets_the_gang_span_racks_of_one_spine() -> None:
    result = run(*four_racks(), queue("q"), topology(), gang("job", 17, topo=constraint(SPINE)))
    assert not result.binds  # a spine has 16 GPUs
    result = run(*four_racks(), queue("q"), topology(), gang("job", 12, topo=constraint(SPINE)))
    spines = {"s1" if FOUR_RACKS[n] in ("r1", "r2") else "s2" for n in binds(result).values()}
    assert len(binds(result)) == 12 and len(spines) == 1


def test_nodes_without_every_level_label_are_outside_the_topology() -> None:
    result = run(node("plain", 8), rack_node("n1", "r1", gpus=2), queue("q"), topology(),
                 gang("job", 2, topo=constraint(RACK)))
    assert set(binds(result).values()) == {"n1"}


def test_topology_annotations_on_the_pod_group_are_a_constraint() -> None:
    objs = gang("job", 4)
    objs[0]["metadata"]["annotations"] = {"kai.scheduler/topology": "dc",
                                          "kai.scheduler/topology-required-placement": RACK}
    result = run(*four_racks(), queue("q"), topology(), *objs)
    assert len(racks_of(result, "job", FOUR_RACKS)) == 1


def test_new_pods_of_a_running_elastic_job_join_its_rack() -> None:
    objs = gang("job", 3, topo=constraint(RACK), min_member=1)
    objs[1]["spec"]["nodeName"] = "n7"  # job-0 runs in r4
    objs[1]["status"]["phase"] = "Running"
    result = run(*four_racks(), queue("q"), topology(), *objs)
    assert {FOUR_RACKS[n] for n in binds(result).values()} == {"r4"}


# ------------------------------------------------------------------------------------------ preferred
def test_preferred_level_packs_one_rack_when_it_can_and_falls_back_when_it_cannot() -> None:
    result = run(*four_racks(), queue("q"), topology(), gang("small", 6, topo=constraint(preferred=RACK)))
    assert len(racks_of(result, "small", FOUR_RACKS)) == 1
    result = run(*four_racks(), queue("q"), topology(), gang("big", 12, topo=constraint(preferred=RACK)))
    assert len(binds(result)) == 12  # a preference never keeps a job pending
    assert len(racks_of(result, "big", FOUR_RACKS)) == 2


def test_preferred_rack_within_required_spine() -> None:
    result = run(*four_racks(), queue("q"), topology(), gang("job", 17, topo=constraint(SPINE, RACK)))
    assert not result.binds  # the requirement holds: a spine has 16 GPUs
    result = run(*four_racks(), queue("q"), topology(), gang("job", 10, topo=constraint(SPINE, RACK)))
    placed = racks_of(result, "job", FOUR_RACKS)
    assert len(binds(result)) == 10 and (placed <= {"r1", "r2"} or placed <= {"r3", "r4"})


# ------------------------------------------------------------------------------------------ subgroups
def test_subgroups_each_in_their_own_rack_within_one_spine() -> None:
    sub_groups = [
        {"name": "leader", "minMember": 1, "topologyConstraint": constraint(RACK)},
        {"name": "workers", "minMember": 4, "topologyConstraint": constraint(RACK)},
    ]
    objs = gang("job", 5, topo=constraint(SPINE), sub_groups=sub_groups,
                pod_sub_groups=["leader", "workers", "workers", "workers", "workers"], min_member=5)
    result = run(*four_racks(), queue("q"), topology(), *objs)
    assert len(binds(result)) == 5
    workers = {FOUR_RACKS[n] for p, n in binds(result).items() if p != "default/job-0"}
    assert len(workers) == 1
    spines = {"s1" if FOUR_RACKS[n] in ("r1", "r2") else "s2" for n in binds(result).values()}
    assert len(spines) == 1


def test_a_gang_with_subgroups_waits_until_every_subgroup_can_start() -> None:
    sub_groups = [{"name": "prefill", "minMember": 2}, {"name": "decode", "minMember": 2}]
    objs = gang("job", 3, sub_groups=sub_groups, pod_sub_groups=["prefill", "prefill", "decode"])
    result = run(*four_racks(), queue("q"), topology(), *objs)
    assert not result.binds
    assert status(result, "job").reason == "NotReady"
    assert "SubGroup decode" in status(result, "job").message


def test_nested_subgroup_sets_carry_constraints_down() -> None:
    sub_groups = [
        {"name": "replica-a", "topologyConstraint": constraint(RACK)},
        {"name": "a-1", "parent": "replica-a", "minMember": 2},
        {"name": "a-2", "parent": "replica-a", "minMember": 2},
        {"name": "replica-b", "topologyConstraint": constraint(RACK)},
        {"name": "b-1", "parent": "replica-b", "minMember": 2},
        {"name": "b-2", "parent": "replica-b", "minMember": 2},
    ]
    objs = gang("job", 8, gpus=2, sub_groups=sub_groups,
                pod_sub_groups=["a-1", "a-1", "a-2", "a-2", "b-1", "b-1", "b-2", "b-2"])
    result = run(*four_racks(), queue("q"), topology(), *objs)
    assert len(binds(result)) == 8
    a = {FOUR_RACKS[n] for p, n in binds(result).items() if int(p[-1]) < 4}
    b = {FOUR_RACKS[n] for p, n in binds(result).items() if int(p[-1]) >= 4}
    assert len(a) == 1 and len(b) == 1  # each replica (4 pods x 2 GPUs = a rack) in one rack


def test_subgroup_pending_reason_names_the_subgroup() -> None:
    sub_groups = [{"name": "small", "minMember": 1, "topologyConstraint": constraint(RACK)},
                  {"name": "huge", "minMember": 9, "topologyConstraint": constraint(RACK)}]
    objs = gang("job", 10, sub_groups=sub_groups, pod_sub_groups=["small", *["huge"] * 9])
    message = status(run(*four_racks(), queue("q"), topology(), *objs), "job").message
    assert f"requirement {RACK} couldn't be satisfied for job <default/job>, subgroup huge" in message


# ------------------------------------------------------------------------------------------- actions
def test_reclaim_respects_the_required_rack() -> None:
    """Queue b reclaims a whole rack from queue a: its gang must not be split over two racks' evictions."""
    where = {f"default/a{i}-0": n for i, n in enumerate(FOUR_RACKS)}
    a_jobs = [o for i, n in enumerate(FOUR_RACKS) for o in
              (pod_group(f"a{i}", queue="a"), pod(f"a{i}-0", group=f"a{i}", gpus=4, node=n))]
    result = run(*four_racks(), queue("a", gpu=0, gpu_weight=0), queue("b", gpu=8), topology(), *a_jobs,
                 gang("b", 8, q="b", topo=constraint(RACK)))
    evicted = [e.pod for e in result.evictions]
    assert len(evicted) == 2
    assert len({FOUR_RACKS[where[p]] for p in evicted}) == 1  # both victims in one rack
    assert {FOUR_RACKS[p.node] for p in result.pipelined} == {FOUR_RACKS[where[evicted[0]]]}
    assert len(result.pipelined) == 8


def test_without_the_topology_plugin_constraints_have_no_effect() -> None:
    from kaisched.framework.config import DEFAULT_PLUGINS

    tiers = [{"plugins": [{"name": p.name, **({"arguments": dict(p.arguments)} if p.arguments else {})}
                          for p in DEFAULT_PLUGINS if p.name != "topology"]}]
    result = run(*four_racks(), queue("q"), topology(), gang("big", 9, topo=constraint(RACK)),
                 config={"tiers": tiers})
    assert len(binds(result)) == 9


# ------------------------------------------------------------------------------------------- segments
def _segmented(n: int, size: object, required: str = RACK, min_member: int | None = None) -> list[Obj]:
    objs = gang("job", n, topo=constraint(SPINE), min_member=min_member)
    for i, p in enumerate(objs[1:]):
        p["metadata"]["annotations"].update({"kai.scheduler/segment-size": str(size),
                                             "kai.scheduler/segment-topology-required-placement": required})
        p["metadata"]["labels"] = {"training.kubeflow.org/replica-index": str(i)}
    return objs


def test_segments_put_every_block_of_workers_in_one_rack() -> None:
    # 8 pods in segments of 4, each segment in one rack (4 GPUs per node, 8 per rack), all in one spine
    running = [pod_group("busy", queue="q"), pod("busy-0", group="busy", gpus=2, node="n1"),
               pod_group("busy2", queue="q"), pod("busy2-0", group="busy2", gpus=2, node="n3")]
    result = run(*four_racks(), queue("q"), topology(), *running, *_segmented(8, 4))
    placed = binds(result)
    assert len([p for p in placed if p.startswith("default/job-")]) == 8
    seg0 = {FOUR_RACKS[placed[f"default/job-{i}"]] for i in range(4)}
    seg1 = {FOUR_RACKS[placed[f"default/job-{i}"]] for i in range(4, 8)}
    assert len(seg0) == 1 and len(seg1) == 1
    # without segments the 8 pods would not fit one rack with 2 GPUs taken; the spine holds them
    spines = {"s1" if FOUR_RACKS[n] in ("r1", "r2") else "s2" for p, n in placed.items() if p.startswith("default/job")}
    assert len(spines) == 1


def test_a_segment_that_no_rack_holds_keeps_the_gang_pending() -> None:
    result = run(*four_racks(), queue("q"), topology(), *_segmented(10, 9))
    assert not result.binds
    assert status(result, "job").message == (
        f"topology dc, requirement {RACK} couldn't be satisfied for job <default/job>, subgroup default-0: no "
        f"{RACK} domain has room for it")


def test_invalid_segment_size_is_an_input_error() -> None:
    result = run(*four_racks(), queue("q"), topology(), *_segmented(4, "many"))
    assert any(e.field == "metadata.annotations.kai.scheduler/segment-size" for e in result.errors)
    assert len(binds(result)) == 4  # not segmented, still scheduled within the spine
