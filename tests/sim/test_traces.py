"""Trace loaders: OpenB node and pod lists, generic job CSVs (Philly / Helios / Acme presets), job objects."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

import kaisched
from kaisched.sim import traces as T
from kaisched.sim.traces import TraceError

OPENB = Path("/work/shared/traces/openb")
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time," \
             "scheduled_time\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def pod_of(arrival: T.Arrival) -> dict:
    return next(o for o in arrival.objects if o["kind"] == "Pod")


def group_of(arrival: T.Arrival) -> dict:
    return next(o for o in arrival.objects if o["kind"] == "PodGroup")


def requests(pod: dict) -> dict:
    return pod["spec"]["containers"][0]["resources"]["requests"]


# ------------------------------------------------------------------------------------------ job objects


def test_job_objects_whole_fraction_and_cpu_only():
    whole = T.job_objects("j", "ns", "q", 2, 4, "8", "32Gi", "train", None)
    assert [o["kind"] for o in whole] == ["PodGroup", "Pod", "Pod"]
    pg = whole[0]
    assert pg["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert pg["spec"] == {"queue": "q", "minMember": 2, "priorityClassName": "train"}
    pod = whole[1]
    assert pod["metadata"]["name"] == "j-0" and pod["metadata"]["namespace"] == "ns"
    assert pod["metadata"]["annotations"] == {"pod-group-name": "j"}
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert requests(pod) == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == requests(pod)

    frac = T.job_objects("f", "ns", "q", 1, 0.25, 2, "1Gi", "inference", 1)
    assert frac[1]["metadata"]["annotations"] == {"pod-group-name": "f", "gpu-fraction": "0.25"}
    assert "nvidia.com/gpu" not in requests(frac[1])
    assert frac[0]["spec"]["priorityClassName"] == "inference"

    cpu = T.job_objects("c", "ns", "q", 1, 0, "500m", "1Gi", "train", 1)
    assert requests(cpu[1]) == {"cpu": "500m", "memory": "1Gi"}
    assert "gpu-fraction" not in cpu[1]["metadata"]["annotations"]


def test_job_objects_affinity_and_validation():
    objs = T.job_objects("a", "ns", "q", 1, 1, 1, "1Gi", "train", 1, {"nvidia.com/gpu.product": ["T4", "P100"]})
    term = objs[1]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["T4", "P100"]}]}]}
    with pytest.raises(ValueError, match="whole number or a fraction"):
        T.job_objects("x", "ns", "q", 1, 1.5, 1, "1Gi", "train", 1)
    with pytest.raises(ValueError, match="min_member"):
        T.job_objects("x", "ns", "q", 2, 1, 1, "1Gi", "train", 3)
    with pytest.raises(ValueError, match="pods"):
        T.job_objects("x", "ns", "q", 0, 1, 1, "1Gi", "train", None)


def test_job_objects_are_schedulable():
    labels = {"nvidia.com/gpu.product": "T4"}
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "labels": labels},
              "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"},
                         "conditions": [{"type": "Ready", "status": "True"}]}}]
    objs = [*nodes, *T.queue_objects(["q"]),
            *T.job_objects("gang", "default", "q", 2, 1, 1, "1Gi", "train", None, {"nvidia.com/gpu.product": ["T4"]}),
            *T.job_objects("half", "default", "q", 1, 0.5, 1, "1Gi", "train", 1),
            *T.job_objects("cpu", "default", "q", 1, 0, 1, "1Gi", "train", 1),
            *T.job_objects("elsewhere", "default", "q", 1, 1, 1, "1Gi", "train", 1,
                           {"nvidia.com/gpu.product": ["A100"]})]
    result = kaisched.schedule(objs, {"actions": "allocate"})
    assert not result.errors
    assert {b.pod for b in result.binds} == {"default/gang-0", "default/gang-1", "default/half-0", "default/cpu-0"}
    assert result.pod_group("default/elsewhere").status == "Pending"


def test_queue_objects_from_arrivals():
    arrivals = [T.Arrival(0, "a", "q1", (), 1), T.Arrival(0, "b", "q2", (), 1), T.Arrival(0, "c", "q1", (), 1)]
    queues = T.queue_objects(arrivals, parent="root")
    assert [q["metadata"]["name"] for q in queues] == ["q1", "q2"]
    assert queues[0]["spec"]["parentQueue"] == "root"
    assert queues[0]["spec"]["resources"]["gpu"] == {"quota": -1, "limit": -1, "overQuotaWeight": 1}


# ---------------------------------------------------------------------------------------------- OpenB


def test_openb_nodes(tmp_path):
    p = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                                     "n0,64000,262144,2,P100\nn1,32000,131072,0,\nn2,96000,786432,8,G2\n")
    nodes = T.openb_nodes(p)
    assert [n["metadata"]["name"] for n in nodes] == ["n0", "n2"]
    n0 = nodes[0]
    assert n0["status"]["allocatable"] == {"cpu": "64000m", "memory": "262144Mi", "pods": "110", "nvidia.com/gpu": "2"}
    assert n0["metadata"]["labels"]["nvidia.com/gpu.product"] == "P100"
    assert n0["metadata"]["labels"]["nvidia.com/gpu.memory"] == "16384"
    assert nodes[1]["metadata"]["labels"]["nvidia.com/gpu.memory"] == str(T.OPENB_DEFAULT_GPU_MEMORY_MIB)
    assert n0["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    everything = T.openb_nodes(p, gpu_only=False, gpu_memory=40000)
    assert len(everything) == 3
    assert "nvidia.com/gpu" not in everything[1]["status"]["allocatable"]
    assert everything[2]["metadata"]["labels"]["nvidia.com/gpu.memory"] == "40000"


def test_openb_arrivals_rows(tmp_path):
    p = write(tmp_path, "pods.csv", POD_HEADER
              + "frac,6000,12288,1,460,,LS,Running,100,5000,150\n"
              + "whole,12000,16384,2,1000,T4|P100|T4,BE,Succeeded,50,1050,60\n"
              + "cpu,4000,8192,0,0,,Burstable,Running,300,400,300\n"
              + "never,1000,1024,1,1000,,BE,Pending,200,260,\n")
    arrivals = T.openb_arrivals(p, queue="team", namespace="ns")
    assert [a.name for a in arrivals] == ["ns/whole", "ns/frac", "ns/never", "ns/cpu"]  # by creation time
    whole, frac, never, cpu = arrivals
    assert (whole.time, whole.duration, whole.gpus, whole.queue) == (0, 990, 2, "team")
    assert requests(pod_of(whole)) == {"cpu": "12000m", "memory": "16384Mi", "nvidia.com/gpu": "2"}
    affinity = pod_of(whole)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["T4", "P100"]
    assert group_of(whole)["spec"]["priorityClassName"] == "train"
    assert (frac.time, frac.duration, frac.gpus) == (50, 4850, 0.46)
    assert pod_of(frac)["metadata"]["annotations"]["gpu-fraction"] == "0.46"
    assert "nvidia.com/gpu" not in requests(pod_of(frac))
    assert group_of(frac)["spec"] == {"queue": "team", "minMember": 1, "priorityClassName": "inference"}
    assert "affinity" not in pod_of(frac)["spec"]
    assert (cpu.duration, cpu.gpus) == (100, 0)
    assert requests(pod_of(cpu)) == {"cpu": "4000m", "memory": "8192Mi"}
    assert never.duration == 60  # never scheduled: deletion - creation

    skipped = T.openb_arrivals(p, queue="team", skip_unscheduled=True, limit=2, time_scale=0.5)
    assert [a.name for a in skipped] == ["default/whole", "default/frac"]
    assert (skipped[1].time, skipped[1].duration) == (25, 2425)


def test_openb_arrivals_without_times(tmp_path):
    p = write(tmp_path, "multi.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,8,1000\n")
    (a,) = T.openb_arrivals(p, queue="q")
    assert (a.time, a.duration, a.gpus) == (0, math.inf, 8)
    (b,) = T.openb_arrivals(p, queue="q", default_duration=3600)
    assert b.duration == 3600


@pytest.mark.parametrize(("row", "column", "message"), [
    ("p,1000,1024,one,1000,,LS,Running,0,10,0", "num_gpu", "expected an integer, got 'one'"),
    ("p,1000,1024,1,0,,LS,Running,0,10,0", "gpu_milli", "0 milli-GPU"),
    ("p,-5,1024,1,1000,,LS,Running,0,10,0", "cpu_milli", "must be >= 0"),
    ("p,1000,1024,1,1000,,LS,Running,soon,10,0", "creation_time", "expected a number"),
    (",1000,1024,1,1000,,LS,Running,0,10,0", "name", "needs a name"),
])
def test_openb_bad_rows(tmp_path, row, column, message):
    p = write(tmp_path, "bad.csv", POD_HEADER + "ok,1000,1024,1,1000,,LS,Running,0,10,0\n" + row + "\n")
    with pytest.raises(TraceError, match=message) as err:
        T.openb_arrivals(p, queue="q")
    assert err.value.problem.line == 3
    assert err.value.problem.column == column
    assert str(err.value).startswith(f"{p}:3: column {column!r}: ")


def test_openb_missing_column(tmp_path):
    p = write(tmp_path, "bad.csv", "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n")
    with pytest.raises(TraceError, match="no such column") as err:
        T.openb_arrivals(p, queue="q")
    assert (err.value.problem.line, err.value.problem.column) == (1, "gpu_milli")


@pytest.mark.skipif(not OPENB.exists(), reason="OpenB trace not available")
def test_openb_real_files_smoke():
    nodes = T.openb_nodes(OPENB / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes) == 6212
    assert len(T.openb_nodes(OPENB / "openb_node_list_all_node.csv", gpu_only=False)) == 1523
    arrivals = T.openb_arrivals(OPENB / "openb_pod_list_gpuspec33.csv", queue="q", limit=200)
    assert len(arrivals) == 200
    assert arrivals[0].time == 0 and all(a.time <= b.time for a, b in itertools.pairwise(arrivals))
    objs = [*nodes, *T.queue_objects(["q"])] + [o for a in arrivals for o in a.objects]
    result = kaisched.schedule(objs, {"actions": "allocate"})
    assert not result.errors
    assert len(result.binds) > 150


# ------------------------------------------------------------------------------------------ generic CSV

HELIOS_CSV = """job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0
1425512,uVMrF,vchbv,16,32,2,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0
1425513,uzqls,vcpDC,0,4,1,CANCELLED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-17 14:15:21,,0
"""

ACME_CSV = (
    "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time\n"
    "5778432,u5907,1,8,128,Other,FAILED,2023-03-01 00:18:22+08:00,2023-03-01 00:18:54+08:00,"
    "2023-03-01 00:20:51+08:00,117,32,936.0\n"
    "5778469,u5907,4,32,512,Other,COMPLETED,2023-03-01 00:23:58+08:00,2023-03-01 00:24:11+08:00,"
    "2023-03-01 01:09:04+08:00,2693,13,21544.0\n"
)

PHILLY_CSV = """user,vc,jobname,gpu_num,state,submit_time,duration
ce2f4c,ee9e8c,application_1506638472019_14199,16,Pass,2017-10-07 01:11:39,200
ce2f4c,ee9e8c,application_1506638472019_14200,0.5,Pass,2017-10-07 01:11:40,10
"""


def test_helios_preset(tmp_path):
    p = write(tmp_path, "cluster_log.csv", HELIOS_CSV)
    arrivals = T.csv_arrivals(p, T.HELIOS, namespace="helios")
    assert [a.name for a in arrivals] == ["helios/1425511", "helios/1425512", "helios/1425513"]
    one, gang, cpu = arrivals
    assert (one.time, one.duration, one.gpus, one.queue) == (0, 36848, 1, "vcJkd")
    assert (gang.time, gang.duration, gang.gpus) == (26, 249, 16)
    assert group_of(gang)["spec"]["minMember"] == 2
    pods = [o for o in gang.objects if o["kind"] == "Pod"]
    assert len(pods) == 2 and all(requests(x)["nvidia.com/gpu"] == "8" and requests(x)["cpu"] == "16" for x in pods)
    # no duration: end - start
    assert cpu.duration == (7 * 24 + 19) * 3600 + 33 * 60 + 53 and cpu.gpus == 0
    assert [a.name for a in T.csv_arrivals(p, preset="helios", gpu_jobs_only=True)] == ["default/1425511",
                                                                                        "default/1425512"]


def test_acme_preset_dates_with_zones(tmp_path):
    p = write(tmp_path, "trace_seren.csv", ACME_CSV)
    first, second = T.csv_arrivals(p, "acme", default_queue="x")
    assert (first.time, first.duration, first.gpus, first.queue) == (0, 117, 8, "u5907")
    assert (second.time, second.duration, second.gpus) == (336, 2693, 32)
    assert group_of(second)["spec"]["minMember"] == 4
    assert all(requests(o)["nvidia.com/gpu"] == "8" for o in second.objects if o["kind"] == "Pod")


def test_philly_preset_splits_large_jobs_and_cleans_names(tmp_path):
    p = write(tmp_path, "philly_trace.csv", PHILLY_CSV)
    big, small = T.csv_arrivals(p, T.PHILLY)
    assert big.name == "default/application-1506638472019-14199"
    assert group_of(big)["spec"]["minMember"] == 2 and big.gpus == 16
    assert small.time == 1 and small.gpus == 0.5
    assert pod_of(small)["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    four = T.csv_arrivals(p, T.PHILLY, max_gpus_per_pod=4)[0]
    assert group_of(four)["spec"]["minMember"] == 4


def test_custom_mapping_seconds_per_pod_and_units(tmp_path):
    p = write(tmp_path, "jobs.csv", "id,t,len,g,n,team\na,120,2,2,3,red\nb,60,1,0.25,1,\nb,60,1,1,1,blue\n")
    mapping = {"name": "id", "submit": "t", "duration": "len", "gpus": "g", "pods": "n", "queue": "team"}
    b, b2, a = T.csv_arrivals(p, mapping, gpus_per_pod=True, time_unit="min", default_queue="dq")
    assert (a.time, a.duration, a.gpus, a.queue) == (3600, 120, 6, "red")
    assert group_of(a)["spec"]["minMember"] == 3
    assert (b.name, b.queue, b.gpus) == ("default/b", "dq", 0.25)
    assert b2.name == "default/b-4"  # a repeated name gets the line number
    limited = T.csv_arrivals(p, mapping, limit=1, time_scale=2)
    assert [x.name for x in limited] == ["default/b"] and limited[0].duration == 2


@pytest.mark.parametrize(("text", "line", "column", "message"), [
    ("id,t,len,g\na,0,10,1\nb,yesterday,10,1\n", 3, "t", "expected seconds or a date"),
    ("id,t,len,g\na,0,10,1\nb,0,-3,1\n", 3, "len", "must be >= 0"),
    ("id,t,len,g\na,0,10,1\nb,0,10,lots\n", 3, "g", "expected a number of GPUs"),
    ("id,t,len,g\na,0,10,1\nb,0,,1\n", 3, "len", "no duration"),
    ("id,t,len,g\na,0,10,1\nb,,10,1\n", 3, "t", "no submit time"),
    ("id,t,len,g\na,0,10,1.5\n", 2, "g", "whole number or a fraction"),
    ("id,t,len\na,0,10\n", 1, "g", "no such column"),
])
def test_csv_bad_rows(tmp_path, text, line, column, message):
    p = write(tmp_path, "jobs.csv", text)
    mapping = {"name": "id", "submit": "t", "duration": "len", "gpus": "g"}
    with pytest.raises(TraceError, match=message) as err:
        T.csv_arrivals(p, mapping, gpus_per_pod=True)
    assert (err.value.problem.file, err.value.problem.line, err.value.problem.column) == (str(p), line, column)


def test_csv_skip_bad_rows(tmp_path):
    p = write(tmp_path, "jobs.csv", "id,t,len,g\na,0,10,1\nb,later,10,1\nc,5,10,2\n")
    problems: list[T.TraceProblem] = []
    arrivals = T.csv_arrivals(p, {"name": "id", "submit": "t", "duration": "len", "gpus": "g"}, errors="skip",
                              problems=problems)
    assert [a.name for a in arrivals] == ["default/a", "default/c"]
    assert [(x.line, x.column) for x in problems] == [(3, "t")]


def test_csv_mapping_errors(tmp_path):
    p = write(tmp_path, "jobs.csv", "id,t\na,0\n")
    with pytest.raises(ValueError, match="unknown field 'when'"):
        T.csv_arrivals(p, {"when": "t"})
    with pytest.raises(ValueError, match="submit field is required"):
        T.csv_arrivals(p, {"name": "id"})
    with pytest.raises(ValueError, match="expected one of philly, helios, acme"):
        T.csv_arrivals(p, preset="slurm")
    with pytest.raises(ValueError, match="time_unit"):
        T.csv_arrivals(p, {"submit": "t"}, time_unit="days")
    with pytest.raises(ValueError, match="start and end go together"):
        T.csv_arrivals(p, {"submit": "t", "start": "t"})
    # a preset overridden by a mapping; no duration at all -> default_duration
    (a,) = T.csv_arrivals(p, {"name": "id", "submit": "t"}, default_duration=math.inf)
    assert a.duration == math.inf and a.gpus == 0


def test_csv_arrivals_simulate(tmp_path):
    """The loaders' arrivals run in the simulator (when the engine is there)."""
    sim = pytest.importorskip("kaisched.sim")
    p = write(tmp_path, "cluster_log.csv", HELIOS_CSV)
    arrivals = T.csv_arrivals(p, T.HELIOS, gpu_jobs_only=True)
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"},
              "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
                         "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(2)]
    scenario = sim.Scenario(name="helios", cluster=[*nodes, *T.queue_objects(arrivals)], arrivals=arrivals,
                            period=10)
    result = sim.simulate(scenario)
    assert result.summary.completed == 2
