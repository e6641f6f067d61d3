"""The pod-grouper's controller behaviour and default grouper (spec 10.1, 10.2), independent of any kind."""

from __future__ import annotations

import json
from typing import Any

from kaisched import schedule
from kaisched.cluster.schedule import prepare
from kaisched.framework.config import SchedulerConfig
from kaisched.k8s.objects import ParsedObjects, PodGroup
from kaisched.k8s.parse import parse_objects

from .builders import NOW, node, pod, pod_group, priority_class, queue, status

Obj = dict[str, Any]


def owner_obj(kind: str = "ReplicaSet", name: str = "w", *, api_version: str = "apps/v1",
              labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Obj:
    """A ReplicaSet: a kind the default grouper groups (spec 10.3)."""
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {}}


def owned_pod(name: str, owner: Obj, **kwargs: Any) -> Obj:
    p = pod(name, **kwargs)
    m = owner["metadata"]
    p["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                         "name": m["name"], "uid": m["uid"], "controller": True}]
    return p


def grouped(*objs: Obj, params: dict[str, str] | None = None) -> ParsedObjects:
    cfg = SchedulerConfig.from_mapping({"params": params} if params else None)
    return prepare(parse_objects(list(objs)), cfg, NOW)


def only_group(parsed: ParsedObjects) -> PodGroup:
    (pg,) = parsed.pod_groups
    return pg


def test_bare_pod_gets_its_own_pod_group_with_the_default_rules() -> None:
    parsed = grouped(pod("p1", labels={"kai.scheduler/queue": "team-a"}))
    pg = only_group(parsed)
    assert (pg.meta.name, pg.queue, pg.min_member, pg.priority_class_name) == ("pg-p1-default-p1", "team-a", 1,
                                                                               "train")
    assert parsed.pods[0].meta.annotations["pod-group-name"] == "pg-p1-default-p1"


def test_pods_of_an_unknown_kind_are_grouped_by_their_top_owner() -> None:
    w = owner_obj(labels={"kai.scheduler/queue": "team-b", "priorityClassName": "inference",
                          "kai.scheduler/preemptibility": "preemptible"},
                  annotations={"kai.scheduler/topology": "dc",
                               "kai.scheduler/topology-required-placement": "rack"})
    parsed = grouped(w, owned_pod("a", w), owned_pod("b", w))
    pg = only_group(parsed)
    assert pg.meta.name == "pg-w-uid-w"
    assert (pg.queue, pg.priority_class_name, pg.preemptibility) == ("team-b", "inference", "preemptible")
    assert pg.topology_constraint is not None and pg.topology_constraint.required_level == "rack"
    assert {p.meta.annotations["pod-group-name"] for p in parsed.pods} == {"pg-w-uid-w"}
    meta = json.loads(pg.meta.annotations["kai.scheduler/top-owner-metadata"])
    assert meta == {"group": "apps", "kind": "ReplicaSet", "name": "w", "uid": "uid-w", "version": "v1"}
    assert pg.meta.owner_references[0].uid == "uid-w"


def test_queue_falls_back_to_the_pod_then_project_then_default_queue() -> None:
    w = owner_obj()
    assert only_group(grouped(w, owned_pod("a", w, labels={"kai.scheduler/queue": "q1"}))).queue == "q1"
    assert only_group(grouped(w, owned_pod("a", w, labels={"project": "p",
                                                           "kai.scheduler/node-pool": "a100"}))).queue == "p-a100"
    assert only_group(grouped(w, owned_pod("a", w))).queue == "default-queue"


def test_priority_class_must_exist_or_the_kind_default_applies() -> None:
    w = owner_obj(labels={"priorityClassName": "nope"})
    assert only_group(grouped(w, owned_pod("a", w))).priority_class_name == "train"
    custom = priority_class("gold", 500)
    w2 = owner_obj(labels={"priorityClassName": "gold"})
    assert only_group(grouped(custom, w2, owned_pod("a", w2))).priority_class_name == "gold"
    p = owned_pod("a", w)
    p["spec"]["priorityClassName"] = "build"
    assert only_group(grouped(w, p)).priority_class_name == "build"


def test_per_kind_defaults_from_the_configmap() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kai-defaults", "namespace": "kai"},
          "data": {"types": json.dumps([{"typeName": "ReplicaSet", "group": "apps", "priorityName": "inference",
                                         "preemptibility": "non-preemptible"}])}}
    w = owner_obj()
    parsed = grouped(cm, w, owned_pod("a", w), params={"default-priorities-configmap-name": "kai-defaults",
                                                       "default-priorities-configmap-namespace": "kai"})
    pg = only_group(parsed)
    assert (pg.priority_class_name, pg.preemptibility) == ("inference", "non-preemptible")
    broken = {**cm, "data": {"types": "{not json"}}
    parsed = grouped(broken, w, owned_pod("a", w), params={"default-priorities-configmap-name": "kai-defaults"})
    assert [(e.object, e.field) for e in parsed.errors] == [("ConfigMap kai/kai-defaults", "data.types")]


def test_manual_pod_groups_are_kept_and_owned_pods_are_regrouped() -> None:
    manual = [pod_group("mine"), pod("p", group="mine")]
    parsed = grouped(*manual)
    assert [pg.meta.name for pg in parsed.pod_groups] == ["mine"]
    w = owner_obj()
    stale = owned_pod("a", w, group="old-name")
    parsed = grouped(w, stale)
    assert parsed.pods[0].meta.annotations["pod-group-name"] == "pg-w-uid-w"


def test_an_existing_pod_group_of_the_same_name_wins() -> None:
    w = owner_obj(labels={"kai.scheduler/queue": "new"})
    existing = pod_group("pg-w-uid-w", queue="old")
    parsed = grouped(existing, w, owned_pod("a", w))
    assert [(pg.meta.name, pg.queue) for pg in parsed.pod_groups] == [("pg-w-uid-w", "old")]


def test_an_owner_given_only_by_reference_still_groups_its_pods() -> None:
    w = owner_obj("Widget", api_version="example.com/v1")
    parsed = grouped(owned_pod("a", w), owned_pod("b", w))  # the Widget object itself is not in the input
    assert only_group(parsed).meta.name == "pg-w-uid-w"


def test_pods_of_other_schedulers_are_not_grouped() -> None:
    parsed = grouped(pod("other", scheduler="default-scheduler"))
    assert not parsed.pod_groups


def test_unknown_queue_keeps_the_grouped_pod_pending_with_a_reason() -> None:
    w = owner_obj(labels={"kai.scheduler/queue": "missing"})
    result = schedule([node("n1"), queue("q"), w, owned_pod("a", w)], None, NOW)
    assert status(result, "pg-w-uid-w").reason == "QueueDoesNotExist"
    assert not result.binds
