"""The predicates plugin through ``kaisched.schedule`` (spec 8.2, 11.2): node selection rules, node
conditions, taints, ports, inter-pod (anti-)affinity, resource fit and the fit-error histogram."""

from __future__ import annotations

import pytest

import kaisched
from tests.unit.builders import NOW, binds, flatten, job, node, pod, pod_group, queue, status

HOST = "kubernetes.io/hostname"


def run(*parts, config=None):
    return kaisched.schedule(flatten(*parts), config=config, now=NOW)


def place(nodes, **pod_kwargs):
    """Schedule one single-pod job 'p' (1 GPU unless given) on ``nodes``; returns (node or None, message)."""
    pod_kwargs.setdefault("gpus", 1)
    result = run(nodes, queue("q"), job("p", 1, **pod_kwargs))
    assert result.errors == [], result.errors
    st = status(result, "p")
    return binds(result).get("default/p-0"), st.message


def node_affinity(*expressions: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}


def pod_term(labels: dict, key: str = HOST) -> dict:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


def other_running(name: str, node_name: str, *, labels=None, affinity=None, host_port=None, gpus=0, cpu=1):
    """A running pod of a one-pod PodGroup in queue q."""
    return [pod_group(name, "default", "q", 1),
            pod(f"{name}-0", group=name, gpus=gpus, cpu=cpu, node=node_name, labels=labels, affinity=affinity,
                host_port=host_port)]


# ------------------------------------------------------------------------------- selector/affinity
def test_node_selector():
    nodes = [node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"})]
    assert place(nodes, node_selector={"zone": "y"})[0] == "b"
    got, message = place(nodes, node_selector={"zone": "z"})
    assert got is None
    assert message.endswith("no nodes with enough resources were found: "
                            "2 node(s) didn't match Pod's node affinity/selector.")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"key": "gpu", "operator": "In", "values": ["b200", "v100"]}, "c"),
        ({"key": "gpu", "operator": "NotIn", "values": ["a100", "h100"]}, "c"),
        ({"key": "fast", "operator": "Exists"}, "b"),
        ({"key": "fast", "operator": "DoesNotExist"}, "a"),
        ({"key": "gen", "operator": "Gt", "values": ["3"]}, "c"),
        ({"key": "gen", "operator": "Lt", "values": ["3"]}, "a"),
    ],
)
def test_required_node_affinity_operators(expression, expected):
    nodes = [
        node("a", labels={"gpu": "a100", "gen": "2"}),
        node("b", labels={"gpu": "h100", "gen": "3", "fast": "yes"}),
        node("c", labels={"gpu": "b200", "gen": "4"}),
    ]
    # binpack ties go to the smaller name: the chosen node is the first that matches
    assert place(nodes, affinity=node_affinity(expression))[0] == expected


def test_node_affinity_terms_are_ored_and_expressions_anded():
    nodes = [node("a", labels={"zone": "x", "gpu": "a100"}), node("b", labels={"zone": "y", "gpu": "h100"})]
    anded = node_affinity({"key": "zone", "operator": "In", "values": ["x"]},
                          {"key": "gpu", "operator": "In", "values": ["h100"]})
    got, message = place(nodes, affinity=anded)
    assert got is None
    assert "2 node(s) didn't match Pod's node affinity/selector" in message
    ored = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["nowhere"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
    ]}}}
    assert place(nodes, affinity=ored)[0] == "b"


def test_node_affinity_on_node_name_field():
    nodes = [node("a"), node("b")]
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}
    assert place(nodes, affinity=aff)[0] == "b"


# ---------------------------------------------------------------------------------- taints
@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_untolerated_taint_keeps_pods_off(effect):
    nodes = [node("a", taints=[{"key": "dedicated", "value": "infer", "effect": effect}]), node("b")]
    assert place(nodes)[0] == "b"
    got, message = place(nodes[:1])
    assert got is None
    assert "1 node(s) had untolerated taint {dedicated: infer}" in message


def test_prefer_no_schedule_taint_does_not_filter():
    nodes = [node("a", taints=[{"key": "dedicated", "value": "infer", "effect": "PreferNoSchedule"}])]
    assert place(nodes)[0] == "a"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"operator": "Exists"}, True),  # empty key + Exists tolerates everything
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "infer"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "train"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations(toleration, tolerated):
    nodes = [node("a", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])]
    got, _ = place(nodes, tolerations=[toleration])
    assert (got == "a") is tolerated


def test_every_taint_must_be_tolerated():
    nodes = [node("a", taints=[{"key": "k1", "value": "v", "effect": "NoSchedule"},
                               {"key": "k2", "value": "v", "effect": "NoExecute"}])]
    got, message = place(nodes, tolerations=[{"key": "k1", "operator": "Exists"}])
    assert got is None
    assert "untolerated taint {k2: v}" in message
    assert place(nodes, tolerations=[{"key": "k1", "operator": "Exists"}, {"key": "k2", "operator": "Exists"}])[0] \
        == "a"


# ----------------------------------------------------------------------------------- node conditions
def test_cordoned_node_is_skipped():
    got, message = place([node("a", unschedulable=True), node("b")])
    assert got == "b"
    got, message = place([node("a", unschedulable=True)])
    assert got is None
    assert "1 node(s) were unschedulable" in message


def test_not_ready_node_is_skipped():
    assert place([node("a", conditions={"Ready": "False"}), node("b")])[0] == "b"
    got, message = place([node("a", conditions={"Ready": "Unknown"})])
    assert got is None
    assert "NotReady" in message


@pytest.mark.parametrize("condition", ["MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"])
def test_pressure_conditions_make_node_unusable(condition):
    assert place([node("a", conditions={"Ready": "True", condition: "True"}), node("b")])[0] == "b"
    got, message = place([node("a", conditions={"Ready": "True", condition: "True"})])
    assert got is None
    assert f"1 node(s) had {condition} condition" in message


def test_false_pressure_condition_is_fine():
    assert place([node("a", conditions={"Ready": "True", "MemoryPressure": "False"})])[0] == "a"


def test_unusable_nodes_do_not_count_in_queue_capacity():
    result = run(node("a", 8, unschedulable=True), node("b", 4), queue("q"), job("j", 1, gpus=1))
    [q] = result.queues
    assert q.fair_share["gpu"] <= 4


# ------------------------------------------------------------------------------------------ ports
def test_host_port_conflict():
    base = flatten(node("a"), node("b"), other_running("web", "a", host_port=8080, gpus=4))
    # binpack would prefer the busier node a; the port is taken there
    assert place(base, host_port=8080)[0] == "b"
    assert place(base, host_port=9090)[0] == "a"
    got, message = place(flatten(node("a"), other_running("web", "a", host_port=8080)), host_port=8080)
    assert got is None
    assert "1 node(s) didn't have free ports for the requested pod ports" in message


def test_gang_with_same_host_port_spreads_over_nodes():
    result = run(node("a"), node("b"), queue("q"), job("g", 2, gpus=1, host_port=7000))
    assert sorted(binds(result).values()) == ["a", "b"]
    result = run(node("a"), queue("q"), job("g", 2, gpus=1, host_port=7000))
    assert result.binds == []
    assert "didn't have free ports" in status(result, "g").message


# --------------------------------------------------------------------------------- pod affinity
def test_required_pod_affinity_colocates_with_running_pod():
    # a is busier (binpack would pick it); the db pod runs on b
    base = flatten(node("a"), node("b"), other_running("busy", "a", gpus=4),
                   other_running("db", "b", labels={"app": "db"}))
    assert place(base)[0] == "a"
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "db"})]}}
    assert place(base, affinity=aff)[0] == "b"


def test_required_pod_affinity_without_any_match_fails():
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "db"})]}}
    got, message = place([node("a"), node("b")], affinity=aff)
    assert got is None
    assert "2 node(s) didn't match pod affinity rules" in message


def test_first_pod_of_self_selecting_group_is_allowed_and_the_rest_follow():
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "web"})]}}
    result = run(node("a"), node("b"), queue("q"),
                 job("web", 3, gpus=2, labels={"app": "web"}, affinity=aff))
    placed = binds(result)
    assert len(placed) == 3
    assert len(set(placed.values())) == 1


def test_required_anti_affinity_puts_replicas_on_different_nodes():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "web"})]}}
    result = run(node("a"), node("b"), node("c"), queue("q"),
                 job("web", 2, gpus=1, labels={"app": "web"}, affinity=anti))
    placed = binds(result)
    assert len(placed) == 2
    assert len(set(placed.values())) == 2
    # three replicas, two nodes: the gang cannot be placed
    result = run(node("a"), node("b"), queue("q"), job("web", 3, gpus=1, labels={"app": "web"}, affinity=anti))
    assert result.binds == []
    assert "didn't match pod anti-affinity rules" in status(result, "web").message


def test_anti_affinity_against_running_pod_on_zone_key():
    nodes = [node("a", labels={"zone": "z1"}), node("b", labels={"zone": "z1"}), node("c", labels={"zone": "z2"})]
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "db"}, "zone")]}}
    base = flatten(nodes, other_running("db", "a", labels={"app": "db"}))
    assert place(base, affinity=anti)[0] == "c"


def test_existing_pod_anti_affinity_repels_new_pod():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "web"})]}}
    base = flatten(node("a"), node("b"), other_running("loner", "a", gpus=4, affinity=anti))
    assert place(base, labels={"app": "web"})[0] == "b"
    assert place(base, labels={"app": "other"})[0] == "a"
    got, message = place(flatten(node("a"), other_running("loner", "a", affinity=anti)), labels={"app": "web"})
    assert got is None
    assert "1 node(s) didn't satisfy existing pods anti-affinity rules" in message


def test_pod_affinity_is_namespaced_by_default():
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "db"})]}}
    base = flatten(node("a"), node("b"), pod_group("db", "other", "q", 1),
                   pod("db-0", "other", "db", node="b", labels={"app": "db"}))
    got, _ = place(base, affinity=aff)
    assert got is None  # the matching pod lives in another namespace
    aff_all = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**pod_term({"app": "db"}), "namespaces": ["other"]}]}}
    assert place(base, affinity=aff_all)[0] == "b"


# ------------------------------------------------------------------------------------ resources
def test_extended_resource_fit():
    nodes = [node("a"), node("b", extra={"rdma/ib": 1})]
    assert place(nodes, extra={"rdma/ib": 1})[0] == "b"
    result = run(nodes, queue("q"), job("g", 2, gpus=1, extra={"rdma/ib": 1}))
    assert result.binds == []
    assert "didn't have enough resources: rdma/ib" in status(result, "g").message


def test_extended_resource_no_node_has_it():
    got, message = place([node("a")], extra={"example.com/fpga": 1})
    assert got is None
    assert "example.com/fpga" in message


def test_max_pods_per_node():
    base = flatten(node("a", pods=2), node("b"), other_running("r1", "a", gpus=2), other_running("r2", "a", gpus=2))
    assert place(base)[0] == "b"  # a is busiest by GPUs but has no pod slot left
    got, message = place(flatten(node("a", pods=2), other_running("r1", "a"), other_running("r2", "a")))
    assert got is None
    assert "1 node(s) didn't have enough resources: pods" in message


def test_pod_bigger_than_any_node():
    got, message = place([node("a", 8), node("b", 4)], gpus=16)
    assert got is None
    assert "topped at 8" in message
    assert "default/p-0" in message


def test_pod_needing_gpus_in_cluster_without_gpus():
    got, message = place([node("a", 0)], gpus=1)
    assert got is None
    assert "No node in the default node-pool has GPU resources" in message


def test_cpu_and_memory_fit():
    nodes = [node("a", 0, cpu=4, memory="8Gi"), node("b", 0, cpu=16, memory="8Gi"), node("c", 0, cpu=16,
                                                                                         memory="64Gi")]
    assert place(nodes, gpus=0, cpu=8, memory="16Gi")[0] == "c"
    assert place(nodes, gpus=0, cpu="500m", memory="16Gi")[0] == "c"
    assert place(nodes, gpus=0, cpu=8, memory="4Gi")[0] in ("b", "c")


# -------------------------------------------------------------------------------- fit-error text
def test_fit_error_histogram_counts_nodes_per_reason():
    nodes = [
        node("a", 2), node("b", 2),
        node("c", 8, taints=[{"key": "t", "value": "v", "effect": "NoSchedule"}]),
        node("d", 8, unschedulable=True),
        node("e", 8, labels={"zone": "other"}),
    ]
    got, message = place(nodes, gpus=4, node_selector={"zone": "other"})
    assert got == "e"
    got, message = place(nodes, gpus=4, tolerations=[{"key": "t", "operator": "Exists"}],
                         node_selector={"pool": "x"})
    assert got is None
    assert message.endswith("1 node(s) were unschedulable. \n4 node(s) didn't match Pod's node affinity/selector.")
    got, message = place(nodes[:4], gpus=4)
    assert got is None
    assert message == (
        "Resources were not found for pod default/p-0 due to: no nodes with enough resources were found: "
        "1 node(s) had untolerated taint {t: v}. \n"
        "1 node(s) were unschedulable. \n"
        "2 node(s) didn't have enough resources: GPUs."
    )


def test_fit_error_histogram_names_every_missing_resource():
    got, message = place([node("a", 2, cpu=2), node("b", 8, cpu=2), node("c", 2, cpu=64)], gpus=4, cpu=8)
    assert got is None
    assert "1 node(s) didn't have enough resources: GPUs, CPU cores" in message
    assert "1 node(s) didn't have enough resources: CPU cores" in message
    assert "1 node(s) didn't have enough resources: GPUs." in message


def test_fit_error_histogram_of_a_shape_that_failed_before_counts_the_nodes_changed_since():
    """The second job of a shape that failed is checked again only on the nodes changed since the first one
    failed (``placement.recheck_failure``): its message still counts every node as it is then."""
    result = run(
        node("a", 4, cpu=32), node("b", 4, cpu=32), queue("q"),
        other_running("r1", "a", gpus=3, cpu=8), other_running("r2", "b", gpus=3, cpu=8),
        job("j1-big", 1, gpus=2, cpu=8, created="2024-01-01T00:00:00Z"),
        job("j2-cpu", 1, gpus=0, cpu=20, created="2024-01-01T00:00:01Z"),
        job("j3-big", 1, gpus=2, cpu=8, created="2024-01-01T00:00:02Z"),
    )
    assert binds(result) == {"default/j2-cpu-0": "a"}
    assert status(result, "j1-big").message.endswith(
        "no nodes with enough resources were found: 2 node(s) didn't have enough resources: GPUs.")
    assert status(result, "j3-big").message.endswith(
        "no nodes with enough resources were found: 1 node(s) didn't have enough resources: GPUs. \n"
        "1 node(s) didn't have enough resources: GPUs, CPU cores.")


def test_a_pods_labels_decide_its_fit_only_where_some_anti_affinity_reads_them():
    """A running pod's required anti-affinity keeps app=web off its node: a web job fails there, and the
    failure is not reused for a db job of the same shape (its labels are part of the failure key then)."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "web"})]}}
    result = run(node("a", 2), node("b", 1), queue("q"),
                 other_running("guard", "a", gpus=1, affinity=anti), other_running("full", "b", gpus=1),
                 job("j1-web", 1, gpus=1, labels={"app": "web"}, created="2024-01-01T00:00:00Z"),
                 job("j2-db", 1, gpus=1, labels={"app": "db"}, created="2024-01-01T00:00:01Z"))
    assert binds(result) == {"default/j2-db-0": "a"}
    assert "didn't satisfy existing pods anti-affinity rules" in status(result, "j1-web").message


@pytest.mark.interpreted
def test_per_job_labels_share_a_failure_when_no_pod_selects_by_labels():
    """Without any (anti-)affinity in the session, jobs that differ only in their labels are one task shape:
    once one failed, the others fail from the cache (one full evaluation for all of them)."""
    from unittest import mock

    from kaisched.actions import placement

    evaluated: list[str] = []
    original = placement._place

    def counting(ssn, task, *args, **kwargs):
        evaluated.append(task.key)
        return original(ssn, task, *args, **kwargs)

    with mock.patch.object(placement, "_place", counting):
        result = run(node("a", 1), queue("q"), other_running("full", "a", gpus=1),
                     *(job(f"j{i}", 1, gpus=1, labels={"job-name": f"j{i}"}) for i in range(5)))
    assert binds(result) == {}
    assert len(evaluated) == 1
    assert all("didn't have enough resources: GPUs" in status(result, f"j{i}").message for i in range(5))


def test_max_node_resources_message_matches_kai():
    _, message = place([node("a", 8, cpu=64)], gpus=16)
    assert "The pod default/p-0 requires " in message
    assert "Max GPU resources available in a single node in the default node-pool is topped at 8" in message
    _, message = place([node("a", 8, cpu=64)], gpus=0, cpu=100)
    assert "Max CPU resources available in a single node in the default node-pool is topped at 64 cores" in message


def test_detailed_fit_errors_add_one_line_per_node():
    objs = flatten(node("a", 8), node("b", 8, unschedulable=True), queue("q"),
                   other_running("r", "a", gpus=6), job("p", 1, gpus=4))
    plain = status(kaisched.schedule(objs, now=NOW), "p").message
    assert "capacity" not in plain
    detailed = status(kaisched.schedule(objs, config={"params": {"detailed-fit-errors": True}}, now=NOW), "p").message
    assert detailed.startswith(plain)
    assert "\na: Node didn't have enough resources: GPUs, requested: 4, used: 6, capacity: 8" in detailed
    assert "\nb: node(s) were unschedulable" in detailed


def test_failed_gang_releases_its_ports_and_affinity_for_later_jobs():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [pod_term({"app": "web"})]}}
    result = run(
        node("a"), node("b"), queue("q"),
        job("gang", 3, gpus=1, host_port=7000, created="2025-01-01T00:00:00Z"),  # only 2 nodes: fails
        job("web", 2, gpus=1, labels={"app": "web"}, affinity=anti, created="2025-01-01T01:00:00Z"),
        job("solo", 1, gpus=1, host_port=7000, created="2025-01-01T02:00:00Z"),
    )
    placed = binds(result)
    assert not any(k.startswith("default/gang-") for k in placed)
    assert sorted(placed[f"default/web-{i}"] for i in range(2)) == ["a", "b"]
    assert "default/solo-0" in placed
