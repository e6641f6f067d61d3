"""Simulating DRA GPUs (resource.k8s.io/v1): pools with a ``dra`` block publish ResourceSlices, jobs with a
``gpu_claim`` ask GPUs through ResourceClaimTemplates; the claims are created, allocated and released through
the embedded cluster (kaisched.cluster.store), and the metrics count DRA GPUs like device-plugin GPUs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.framework.result import CycleResult
from kaisched.sim import Arrival, ScenarioError, load_scenario, scenario_from_mapping
from kaisched.sim.engine import Simulator
from kaisched.sim.model import Sample, SimResult

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulation" / "dra-gpus.yaml"
H100 = "NVIDIA H100 80GB HBM3"

Obj = dict[str, Any]


def _queue(name: str, gpus: float) -> Obj:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": gpus, "limit": -1, "overQuotaWeight": 1},
                                   "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                   "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}


class Watched(Simulator):
    """A simulator that checks the embedded cluster after every cycle's decisions are applied."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checked: list[tuple[float, CycleResult, int]] = []  # (time, result, devices held by claims)
        self.claims_made = 0
        self.evictions = 0

    def _apply(self, result: CycleResult, t: float) -> None:
        super()._apply(result, t)
        cluster = self.cluster
        holders = cluster.device_holders()
        twice = {device: claims for device, claims in holders.items() if len(claims) > 1}
        assert not twice, f"t={t}: devices held by two claims: {twice}"
        for key, pod in cluster.pods.items():
            claims = cluster.pod_claims(key)
            if pod.node_name:
                assert claims, f"t={t}: {key} runs without its claim"
                for claim in claims:
                    # node-local devices: the pool is the node; reserved by the pod; as many as asked
                    assert {r.pool for r in claim.allocation or ()} == {pod.node_name}, (key, claim)
                    assert [c.uid for c in claim.reserved_for] == [pod.meta.uid]
                    assert len(claim.allocation or ()) == self.gpus_of_pod[key]
            else:
                assert not claims, f"t={t}: pending {key} holds a claim"
        self.claims_made += sum(1 for c in result.claims if c.template)
        self.evictions += len(result.evictions)
        self.checked.append((t, result, len(holders)))


@pytest.fixture(scope="module")
def example() -> tuple[Watched, SimResult]:
    sim = Watched(load_scenario(EXAMPLE))
    return sim, sim.run()


@pytest.mark.interpreted  # (Watched overrides the simulator: compiled classes take no interpreted subclass)
def test_the_example_completes_every_job_and_never_gives_a_device_to_two_claims(
        example: tuple[Watched, SimResult]) -> None:
    sim, result = example
    s = result.summary
    assert s.jobs == 45 and s.completed == s.jobs and s.never_started == 0
    assert sim.claims_made >= sum(len(j.pods) for j in sim.jobs.values())  # one claim per pod (and per restart)
    assert sim.evictions > 0 and s.evictions > 0  # product reclaims its quota: evicted claims are released
    # everything gone at the end: pods, claims, templates
    assert not sim.cluster.pods and not sim.cluster.claims and not sim.cluster.templates
    assert not sim.cluster.device_holders()


@pytest.mark.interpreted  # (Watched overrides the simulator: compiled classes take no interpreted subclass)
def test_the_example_asks_gpus_by_claim_only(example: tuple[Watched, SimResult]) -> None:
    sim, _ = example
    static = sim.static
    assert [c.meta.name for c in static.device_classes] == ["gpu.nvidia.com"]
    assert len(static.resource_slices) == 6 and sum(len(s.devices) for s in static.resource_slices) == 40
    assert all(n.allocatable.get("nvidia.com/gpu", 0) == 0 for n in static.nodes)
    scenario = load_scenario(EXAMPLE)
    pods = [o for a in scenario.arrivals for o in a.objects if o["kind"] == "Pod"]
    assert pods and all("nvidia.com/gpu" not in o["spec"]["containers"][0]["resources"]["requests"] for o in pods)
    assert all(o["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] for o in pods)


@pytest.mark.interpreted  # (Watched overrides the simulator: compiled classes take no interpreted subclass)
def test_selectors_keep_research_on_the_h100_nodes(example: tuple[Watched, SimResult]) -> None:
    sim, _ = example
    nodes = {c.node for _, result, _ in sim.checked for c in result.claims
             if c.pods and c.pods[0].split("/")[1].startswith(("pretrain", "finetune"))}
    assert nodes and all(n.startswith("h100-") for n in nodes)
    serve = {c.node for _, result, _ in sim.checked for c in result.claims
             if c.pods[0].split("/")[1].startswith("serve")}
    assert serve


@pytest.mark.interpreted  # (Watched overrides the simulator: compiled classes take no interpreted subclass)
def test_the_metrics_count_the_dra_gpus(example: tuple[Watched, SimResult]) -> None:
    sim, result = example
    assert all(s.gpus_total == 40 for s in result.samples)
    samples: dict[float, Sample] = {s.time: s for s in result.samples}
    compared = 0
    for t, cycle, held in sim.checked:
        if cycle.evictions or cycle.pipelined:
            continue  # (the cycle's own view counts its victims, still releasing, and pipelined pods)
        sample = samples[t]
        assert sample.gpus_allocated == pytest.approx(held), t
        assert sample.idle_gpus == pytest.approx(40 - held), t
        assert sum(q.allocated for q in sample.queues.values()) == pytest.approx(held), t
        compared += 1
    assert compared > 50
    assert 0.3 < result.summary.gpu_allocation_mean <= 1.0
    assert result.summary.fractional_allocation_mean == 0.0
    for job in result.jobs:  # the GPUs a job asks for: its claims' devices
        assert job.gpus in (1, 2, 4, 8, 16, 24)


def test_dra_gpus_and_device_plugin_gpus_give_the_same_run() -> None:
    """The same workload on the same GPUs, once as device-plugin GPUs and once as DRA devices."""
    def scenario(dra: bool) -> Obj:
        pool: Obj = {"name": "n", "count": 2, "cpu": 64, "memory": "512Gi"}
        if dra:
            pool["dra"] = {"driver": "gpu.nvidia.com", "devices": 4}
        else:
            pool["gpus"] = 4
        ask: Obj = {"gpu_claim": {"count": [1, 2, 4]}} if dra else {"gpus": [1, 2, 4]}
        return {"name": "same", "period": "30s", "seed": 3,
                "cluster": {"pools": [pool], "objects": [_queue("a", 4), _queue("b", 4)]},
                "workload": {"generate": [
                    {"name": "a", "queue": "a", "jobs": 15, "every": "10m", "pods": [1, 2], "duration": ["10m", "1h"],
                     **ask},
                    {"name": "b", "queue": "b", "jobs": 15, "every": "12m", "pods": [1], "duration": ["10m", "1h"],
                     **ask}]}}

    plugin = Simulator(scenario_from_mapping(scenario(False))).run()
    dra = Simulator(scenario_from_mapping(scenario(True))).run()
    assert [j.gpus for j in dra.jobs] == [j.gpus for j in plugin.jobs]
    assert dra.summary.completed == plugin.summary.completed == 30
    assert dra.summary.gpu_allocation_mean == pytest.approx(plugin.summary.gpu_allocation_mean)
    assert [(j.start, j.end) for j in dra.jobs] == [(j.start, j.end) for j in plugin.jobs]
    assert [(s.gpus_total, s.gpus_allocated) for s in dra.samples] == \
        [(s.gpus_total, s.gpus_allocated) for s in plugin.samples]


def test_simulate_runs_the_example_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["simulate", str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "dra-gpus"
    assert summary["summary"]["completed"] == summary["summary"]["jobs"] == 45
    assert (out / "report.html").is_file() and (out / "samples.csv").is_file()


# ------------------------------------------------------------------------------------------ the file format
BASE: Obj = {
    "name": "dra",
    "cluster": {"pools": [{"name": "h100", "count": 1,
                           "dra": {"driver": "gpu.nvidia.com", "devices": 2, "memory": "80Gi",
                                   "attributes": {"productName": H100, "cudaCores": 16896, "mig": False,
                                                  "driverVersion": {"version": "570.1.0"}}}}],
                "objects": [_queue("q", 2)]},
    "workload": {"arrivals": [{"time": 0, "duration": "1h",
                               "job": {"name": "j", "queue": "q", "pods": 2, "gpu_claim": {"count": 1}}}]},
}


def _with(path: str, value: object) -> Obj:
    doc = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    cur: Any = doc
    for part in parents:
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    if value is _DELETE:
        del cur[last]
    else:
        cur[last] = value
    return doc


_DELETE = object()
POOL_DRA = "cluster.pools.0.dra"
JOB = "workload.arrivals.0.job"


def test_a_pool_dra_block_makes_a_resource_slice_per_node_and_a_device_class() -> None:
    scenario = scenario_from_mapping(BASE)
    kinds = [o["kind"] for o in scenario.cluster]
    assert kinds == ["Queue", "Node", "ResourceSlice", "DeviceClass"]
    _, node, slice_, device_class = scenario.cluster
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    spec = slice_["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == ("gpu.nvidia.com", "h100-000", "h100-000")
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    assert spec["devices"][1]["attributes"] == {
        "index": {"int": 1}, "uuid": {"string": "GPU-h100-000-1"}, "productName": {"string": H100},
        "cudaCores": {"int": 16896}, "mig": {"bool": False}, "driverVersion": {"version": "570.1.0"}}
    assert spec["devices"][0]["capacity"] == {"memory": {"value": "80Gi"}}
    assert device_class["metadata"]["name"] == "gpu.nvidia.com"
    (arrival,) = scenario.arrivals
    assert arrival.gpus == 2
    kinds = [o["kind"] for o in arrival.objects]
    assert kinds == ["PodGroup", "Pod", "Pod", "ResourceClaimTemplate"]
    template = arrival.objects[-1]
    assert template["metadata"]["name"] == "j-gpu"
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]
    assert arrival.objects[1]["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "j-gpu"}]


def test_a_device_class_given_in_the_cluster_is_kept_and_gpu_claim_accepts_a_count_and_its_camel_case_name() -> None:
    doc = _with(JOB + ".gpu_claim", _DELETE)
    doc["workload"]["arrivals"][0]["job"].update(gpuClaim=2, pods=1)
    mine = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com" && '
                                                         'device.attributes["gpu.nvidia.com"].mig == false'}}]}}
    doc["cluster"]["objects"].append(mine)
    scenario = scenario_from_mapping(doc)
    assert [o for o in scenario.cluster if o["kind"] == "DeviceClass"] == [mine]
    (arrival,) = scenario.arrivals
    assert arrival.gpus == 2
    result = Simulator(scenario).run()
    assert result.summary.completed == 1 and result.summary.gpu_allocation_mean == pytest.approx(1.0)


@pytest.mark.parametrize(("path", "value", "message"), [
    (POOL_DRA, "8", "cluster.pools[0].dra: expected a mapping"),
    (POOL_DRA + ".driver", _DELETE, "cluster.pools[0].dra.driver: required"),
    (POOL_DRA + ".driver", "Not A Name", "cluster.pools[0].dra.driver: expected a driver name"),
    (POOL_DRA + ".driver", "tpu.example.com", "cluster.pools[0].dra.driver: a GPU driver's name contains 'gpu'"),
    (POOL_DRA + ".devices", 0, "cluster.pools[0].dra.devices: expected a positive integer"),
    (POOL_DRA + ".devices", "8", "cluster.pools[0].dra.devices: expected a positive integer"),
    (POOL_DRA + ".device", 8, "cluster.pools[0].dra.device: unknown field (expected driver, devices"),
    (POOL_DRA + ".memory", "lots", "cluster.pools[0].dra.memory: expected a quantity like 80Gi"),
    (POOL_DRA + ".attributes", {"productName": 1.5}, "cluster.pools[0].dra.attributes.productName: expected a string"),
    (POOL_DRA + ".attributes", {"bad name": "x"}, "cluster.pools[0].dra.attributes.bad name: expected an attribute"),
    (POOL_DRA + ".device_class", "accelerators", "cluster.pools[0].dra.device_class: a GPU device class's name"),
    ("cluster.pools.0.gpus", 8, "cluster.pools[0].dra: a pool has device-plugin GPUs (gpus: 8) or DRA GPUs"),
    (JOB + ".gpu_claim", {"count": 0}, "workload.arrivals[0].job.gpu_claim.count: expected a positive integer"),
    (JOB + ".gpu_claim", {"cout": 1}, "workload.arrivals[0].job.gpu_claim.cout: unknown field"),
    (JOB + ".gpu_claim", "two", "workload.arrivals[0].job.gpu_claim: expected a mapping"),
    (JOB + ".gpu_claim", {"selectors": ["device.attributes["]},
     "workload.arrivals[0].job.gpu_claim.selectors[0]: invalid CEL selector"),
    (JOB + ".gpu_claim", {"selectors": [""]}, "workload.arrivals[0].job.gpu_claim.selectors[0]: expected a CEL"),
    (JOB + ".gpu_claim", {"device_class": "gpu.amd.com"},
     "workload.arrivals[0].job.gpu_claim.device_class: the cluster has no DeviceClass 'gpu.amd.com'"),
    (JOB + ".gpus", 1, "workload.arrivals[0].job.gpu_claim: a job asks GPUs by gpus (device plugin) or by gpu_claim"),
])
def test_a_bad_dra_field_is_refused_with_the_field_named(path: str, value: object, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_from_mapping(_with(path, value))
    assert str(err.value).startswith(message), str(err.value)


def test_a_device_class_shared_by_two_drivers_is_refused() -> None:
    doc = copy.deepcopy(BASE)
    doc["cluster"]["pools"].append({"name": "other", "count": 1, "dra": {
        "driver": "gpu.example.com", "devices": 1, "device_class": "gpu.nvidia.com"}})
    with pytest.raises(ScenarioError, match=r"^cluster\.pools\[1\]\.dra\.device_class: DeviceClass 'gpu.nvidia.com'"):
        scenario_from_mapping(doc)


def test_generated_jobs_draw_their_claim_counts() -> None:
    doc = copy.deepcopy(BASE)
    doc["workload"] = {"generate": [{"name": "g", "queue": "q", "jobs": 20, "every": "1m",
                                     "gpu_claim": {"count": [1, 2]}, "duration": "5m"}]}
    scenario = scenario_from_mapping(doc)
    assert {a.gpus for a in scenario.arrivals} == {1, 2}
    assert all(a.objects[-1]["kind"] == "ResourceClaimTemplate" for a in scenario.arrivals)
    bad = copy.deepcopy(doc)
    bad["workload"]["generate"][0]["gpu_claim"] = {"count": []}
    with pytest.raises(ScenarioError, match=r"^workload\.generate\[0\]\.gpu_claim\.count: an empty list"):
        scenario_from_mapping(bad)


@pytest.mark.interpreted  # (Watched overrides the simulator: compiled classes take no interpreted subclass)
def test_manifest_arrivals_bring_their_templates_and_give_their_claims_back() -> None:
    """Two Jobs (manifests) whose pod templates ask GPUs through the same ResourceClaimTemplate, each arriving
    with a copy of it: the first completing does not take the template from the second."""
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "two-gpus", "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}}

    def job(name: str) -> Obj:
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": "default", "labels": {"kai.scheduler/queue": "q"}},
                "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                    "schedulerName": "kai-scheduler", "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}],
                    "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]}}}}

    doc = copy.deepcopy(BASE)
    doc["cluster"]["pools"][0].update(count=2)  # 4 GPUs
    doc["cluster"]["objects"] = [_queue("q", 4)]
    scenario = scenario_from_mapping({**doc, "workload": {}})
    scenario.arrivals = [Arrival(0, "default/first", "q", (copy.deepcopy(template), job("first")), 600),
                         Arrival(60, "default/second", "q", (copy.deepcopy(template), job("second")), 600)]
    sim = Watched(scenario)
    result = sim.run()
    first, second = result.jobs
    assert (first.gpus, second.gpus) == (4, 4)  # 2 pods x a claim of 2 GPUs
    assert (first.start, first.end) == (0, 600)
    assert second.start == 600 and second.end == 1200  # the 4 GPUs are first's until it completes
    assert not sim.cluster.claims and not sim.cluster.templates and not sim.brought
