"""The pod-grouper as a controller: PodGroups created and pods annotated through the writer, idempotently."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from kaisched.cluster.schedule import prepare, resolve_config
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects
from kaisched.kube.api import ApiError
from kaisched.kube.grouper_controller import PodGrouperController
from kaisched.kube.operations import CreatePodGroup, Event, PodGroupSpecPatch, PodMetadataPatch
from kaisched.kube.writer import ClusterWriter
from tests.unit.test_kube_writer import RecordingApi, pod, pod_group

NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
TEMPLATE = {"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]}}
PYTORCH_OWNER = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "tj", "uid": "tj-uid",
                 "controller": True}


def pytorch_job(master: int = 1, workers: int = 2) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "tj", "namespace": "ns", "uid": "tj-uid", "labels": {"kai.scheduler/queue": "team-a"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": master, "template": TEMPLATE},
                                             "Worker": {"replicas": workers, "template": TEMPLATE}}}}


def pytorch_pods() -> list[dict[str, Any]]:
    def one(name: str, kind: str, index: str) -> dict[str, Any]:
        return pod(f"ns/{name}", f"uid-{name}", owner=PYTORCH_OWNER,
                   labels={"training.kubeflow.org/replica-type": kind, "training.kubeflow.org/replica-index": index})
    return [one("tj-master-0", "master", "0"), one("tj-worker-0", "worker", "0"), one("tj-worker-1", "worker", "1")]


def grouped(*objects: dict[str, Any]) -> ParsedObjects:
    return prepare(parse_objects(objects), resolve_config(None), NOW)


def apply(api_pods: list[dict[str, Any]], api_groups: list[dict[str, Any]], ops: list[Any]) -> None:
    """What the API server would hold after the operations (the informer's view)."""
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in api_pods}
    for op in ops:
        if isinstance(op, CreatePodGroup):
            body = copy.deepcopy(dict(op.body))
            body["metadata"]["uid"] = f"uid-{body['metadata']['name']}"
            api_groups.append(body)
        elif isinstance(op, PodMetadataPatch):
            meta = by_key[op.pod.key]["metadata"]
            meta.setdefault("labels", {}).update(op.labels)
            meta.setdefault("annotations", {}).update(op.annotations)


def test_workload_pods_get_their_pod_group_created_and_are_annotated_through_the_writer():
    pods = pytorch_pods()
    controller = PodGrouperController()
    ops = controller.plan(pods, [], grouped(pytorch_job(), *pods), NOW)
    assert [type(op) for op in ops] == [CreatePodGroup, PodMetadataPatch, PodMetadataPatch, PodMetadataPatch]
    api = RecordingApi()
    writer = ClusterWriter(api, workers=2, sleep=lambda s: None)
    try:
        writer.submit(ops)
        assert writer.drain(5)
    finally:
        writer.close()
    (create,) = api.find("POST", "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups")
    assert create.body == {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {
            "name": "pg-tj-tj-uid", "namespace": "ns", "labels": {"kai.scheduler/queue": "team-a"},
            "annotations": {"kai.scheduler/top-owner-metadata": '{"group": "kubeflow.org", "kind": "PyTorchJob", '
                                                                '"name": "tj", "uid": "tj-uid", "version": "v1"}'},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "tj",
                                 "uid": "tj-uid", "controller": True}]},
        "spec": {"minMember": 3, "queue": "team-a", "priorityClassName": "train",
                 "subGroups": [{"name": "master", "minMember": 1}, {"name": "worker", "minMember": 2}]}}
    (patch,) = api.find("PATCH", "/api/v1/namespaces/ns/pods/tj-worker-1")
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {"metadata": {"labels": {"kai.scheduler/subgroup-name": "worker"},
                                       "annotations": {"pod-group-name": "pg-tj-tj-uid"}}}


def test_second_run_with_the_api_updated_does_nothing():
    pods = pytorch_pods()
    bare = pod("ns/solo", "solo-uid", labels={"kai.scheduler/queue": "team-b"})
    api_pods, api_groups = [*pods, bare], []
    controller = PodGrouperController()
    first = controller.plan(api_pods, api_groups, grouped(pytorch_job(), *api_pods), NOW)
    assert sorted(op.target.name for op in first if isinstance(op, CreatePodGroup)) == ["pg-solo-solo-uid",
                                                                                       "pg-tj-tj-uid"]
    apply(api_pods, api_groups, first)
    assert controller.plan(api_pods, api_groups, grouped(pytorch_job(), *api_pods, *api_groups), NOW) == []


def test_bare_pod_gets_a_pod_group_owned_by_itself():
    bare = pod("ns/solo", "solo-uid", labels={"kai.scheduler/queue": "team-b"})
    create, patch = PodGrouperController().plan([bare], [], grouped(bare), NOW)
    assert isinstance(create, CreatePodGroup) and isinstance(patch, PodMetadataPatch)
    assert create.body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "solo", "uid": "solo-uid", "controller": True}]
    assert create.body["spec"]["queue"] == "team-b"
    assert patch.requests()[0].body == {"metadata": {"annotations": {"pod-group-name": "pg-solo-solo-uid"}}}


def test_user_made_pod_groups_and_their_pods_are_left_alone():
    manual = pod("ns/m", annotations={"pod-group-name": "mine"})
    dangling = pod("ns/d", annotations={"pod-group-name": "not-created-yet"})
    mine = pod_group("ns/mine", spec={"queue": "whatever"})
    assert PodGrouperController().plan([manual, dangling], [mine], grouped(manual, dangling, mine), NOW) == []


def test_existing_pod_group_is_not_updated_but_a_pod_missing_its_annotation_is_patched():
    pods = pytorch_pods()
    existing = pod_group("ns/pg-tj-tj-uid", spec={"queue": "old-queue", "minMember": 1})
    ops = PodGrouperController().plan(pods, [existing], grouped(pytorch_job(), *pods, existing), NOW)
    assert [type(op) for op in ops] == [PodMetadataPatch] * 3


def test_other_schedulers_pods_deleted_pods_and_made_up_pods_are_ignored():
    other = pod("ns/o", scheduler="default-scheduler")
    leaving = pod("ns/l", deleting=True)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns", "uid": "j-uid"},
           "spec": {"template": TEMPLATE}}  # prepare() makes its pod up; the API does not have it
    parsed = grouped(other, leaving, job)
    assert any(p.meta.namespace == "ns" and p.meta.name.startswith("j-") for p in parsed.pods)
    assert PodGrouperController().plan([other, leaving], [], parsed, NOW) == []


def test_ungroupable_pod_gets_one_pod_grouper_warning():
    bad_job = pytorch_job(master=0)
    bad = pod("ns/tj-master-0", "m0", owner=PYTORCH_OWNER)
    controller = PodGrouperController()
    ops = controller.plan([bad], [], grouped(bad_job, bad), NOW)
    (event,) = ops
    assert isinstance(event, Event)
    body = event.requests()[0].body
    assert (body["reason"], body["type"], body["source"]) == ("PodGrouperWarning", "Warning",
                                                               {"component": "pod-grouper"})
    assert "spec.pytorchReplicaSpecs.Master.replicas" in body["message"]
    assert body["involvedObject"]["name"] == "tj-master-0"
    assert controller.plan([bad], [], grouped(bad_job, bad), NOW) == []  # not repeated every cycle


def test_pod_group_created_meanwhile_counts_as_done_and_failures_warn_on_the_pod():
    bare = pod("ns/solo", "solo-uid")
    ops = PodGrouperController().plan([bare], [], grouped(bare), NOW)
    api = RecordingApi()
    path = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups"
    api.fail("POST", path, ApiError(409, "AlreadyExists", 'podgroups "pg-solo-solo-uid" already exists'))
    failures: list[Any] = []
    for fault in (None, ApiError(403, "Forbidden", "cannot create podgroups")):
        if fault is not None:
            api.fail("POST", path, fault)
        writer = ClusterWriter(api, workers=1, sleep=lambda s: None, on_failure=failures.append)
        try:
            writer.submit(ops)
            assert writer.drain(5)
        finally:
            writer.close()
        if fault is None:
            assert failures == []  # 409: created meanwhile
    assert [f.error.status for f in failures] == [403]
    (warning,) = api.events("PodGrouperWarning")
    assert warning["involvedObject"]["name"] == "solo"
    assert warning["message"] == ("Failed to create PodGroup ns/pg-solo-solo-uid: 403 Forbidden: cannot create "
                                  "podgroups")


def replan(*objects: dict[str, Any]) -> dict[str, Any]:
    """What the pod-grouper makes afresh of the objects (``group_live``'s ``replanned``)."""
    return {f"{pg.meta.namespace}/{pg.meta.name}": pg for pg in grouped(*objects).pod_groups}


def test_a_pod_group_the_grouper_made_is_updated_when_its_workload_changed_but_keeps_its_queue():
    """KAI's pod-grouper updates the PodGroup of a workload whose pods are grouped again (new pods after the job
    grew): minMember and subgroups follow the workload, the queue stays."""
    pods = pytorch_pods()
    old = pod_group("ns/pg-tj-tj-uid", spec={"queue": "old-queue", "minMember": 2, "priorityClassName": "train",
                                             "subGroups": [{"name": "master", "minMember": 1},
                                                           {"name": "worker", "minMember": 1}]})
    old["metadata"]["ownerReferences"] = [PYTORCH_OWNER]
    now = replan(pytorch_job(workers=2), *pods)
    ops = PodGrouperController().plan(pods, [old], grouped(pytorch_job(workers=2), *pods, old), NOW, now)
    assert [type(op) for op in ops] == [PodGroupSpecPatch] + [PodMetadataPatch] * 3
    (request,) = ops[0].requests()
    assert (request.method, request.path) == ("PATCH", "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/"
                                                        "pg-tj-tj-uid")
    assert request.body == {"spec": {"minMember": 3, "subGroups": [{"name": "master", "minMember": 1},
                                                                   {"name": "worker", "minMember": 2}]}}
    # once the API shows it, nothing more to update
    old["spec"].update(request.body["spec"])
    assert not [op for op in PodGrouperController().plan(pods, [old], grouped(pytorch_job(), *pods, old), NOW, now)
                if isinstance(op, PodGroupSpecPatch)]
    # a PodGroup of another owner (or a user's, with none) is never updated
    for owners in ([{**PYTORCH_OWNER, "uid": "another"}], []):
        old["metadata"]["ownerReferences"] = owners
        old["spec"]["minMember"] = 1
        assert not [op for op in PodGrouperController().plan(pods, [old], grouped(pytorch_job(), *pods, old), NOW,
                                                             now) if isinstance(op, PodGroupSpecPatch)]


def test_the_plans_of_existing_pod_groups_come_with_the_one_grouping_pass():
    """``group_pods(..., replanned=)`` gives, for each existing PodGroup pods are grouped into, exactly what a second
    pass over the same pods with no PodGroup at all plans for it (what group_live ran before: twice the grouping)."""
    from kaisched.podgrouper.grouper import group_pods

    old = pod_group("ns/pg-tj-tj-uid", spec={"queue": "old-queue", "minMember": 2, "priorityClassName": "train"})
    old["metadata"]["ownerReferences"] = [PYTORCH_OWNER]
    solo_group = pod_group("ns/pg-solo-solo-uid", spec={"queue": "q", "minMember": 1})
    pods = [*pytorch_pods(), pod("ns/solo", "solo-uid"), pod("ns/new", "new-uid")]
    parsed = parse_objects([pytorch_job(workers=2), *pods, old, solo_group])
    args: dict[str, Any] = {"scheduler_name": "kai-scheduler", "priority_classes": frozenset({"train"}),
                            "defaults": {}, "now": NOW}
    plans: dict[tuple[str, str], Any] = {}
    one_pass = group_pods(parsed, **args, replanned=plans)
    afresh = group_pods(ParsedObjects(pods=parsed.pods, workloads=parsed.workloads), **args)
    existing = {(pg.meta.namespace, pg.meta.name) for pg in parsed.pod_groups}
    expected = {(pg.meta.namespace, pg.meta.name): pg for pg in afresh.pod_groups
                if (pg.meta.namespace, pg.meta.name) in existing}
    assert set(plans) == existing and plans == expected
    assert plans[("ns", "pg-tj-tj-uid")].min_member == 3  # the workload now: 1 master + 2 workers
    assert one_pass.pod_groups[:2] == parsed.pod_groups and len(one_pass.pod_groups) == 3  # only "new" is added
    assert group_pods(parsed, **args).pod_groups == one_pass.pod_groups  # the grouping itself is unchanged
