"""The simulator's outputs: CSV / JSON files, the HTML report, the comparison and the terminal summary."""

from __future__ import annotations

import csv
import json
import math
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from kaisched.sim.model import JobRecord, QueueSample, Sample, SimResult, Stats, Summary
from kaisched.sim.report import (
    JOBS_COLUMNS,
    QUEUES_COLUMNS,
    SAMPLES_COLUMNS,
    compare,
    compare_text,
    downsample,
    format_duration,
    summary_text,
    write_outputs,
)

PLOTS = 3  # plots in report.html: utilisation, per-queue, waiting time / JCT
COMPARE_PLOTS = 3


def _stats(values: list[float]) -> Stats:
    if not values:
        return Stats(0, 0.0, 0.0, 0.0, 0.0)
    a = np.asarray(values)
    return Stats(
        len(values),
        float(a.mean()),
        float(np.percentile(a, 50)),
        float(np.percentile(a, 95)),
        float(np.percentile(a, 99)),
    )


def _result(name: str = "two-teams", scale: float = 1.0) -> SimResult:
    samples = []
    for i in range(6):
        t = 600.0 * i
        qa = QueueSample(allocated=4.0 * scale, fair_share=4.0, deserved=4.0, requested=6.0)
        qb = QueueSample(allocated=2.5, fair_share=3.0, deserved=-1.0, requested=2.5 + i)
        queues = {"team-a": qa, "team-b": qb}
        if i >= 2:
            queues["team-c"] = QueueSample(allocated=0.0, fair_share=1.0, deserved=2.0, requested=1.0)
        samples.append(
            Sample(
                time=t,
                gpus_total=8.0,
                gpus_allocated=6.5,
                gpus_fractional=0.5,
                idle_gpus=1.0,
                fragmentation=0.25 if i % 2 else 0.0,
                pending_jobs=2,
                running_jobs=3,
                queues=queues,
            )
        )
    jobs = [
        JobRecord("ns/train-1", "team-a", 4.0, arrival=0.0, duration=1800.0, start=0.0, end=1800.0),
        JobRecord("ns/train-2", "team-a", 2.0, arrival=60.0, duration=1200.0, start=660.0, end=2400.0 * scale),
        JobRecord(
            "ns/infer-1",
            "team-b",
            0.5,
            arrival=0.0,
            duration=3000.0,
            start=0.0,
            end=3600.0,
            evictions=1,
            lost_gpu_seconds=300.0,
        ),
        JobRecord("ns/stuck", "team-c", 16.0, arrival=1200.0, duration=600.0),
    ]
    waits = [j.wait for j in jobs if j.wait is not None]
    jcts = [j.jct for j in jobs if j.jct is not None]
    summary = Summary(
        jobs=4,
        completed=3,
        never_started=1,
        makespan=3600.0,
        gpu_allocation_mean=0.8137 * scale,
        fractional_allocation_mean=0.0625,
        wait=_stats(waits),
        jct=_stats(jcts),
        evictions=1,
        gpu_hours_lost=300.0 / 3600,
        fragmentation_mean=0.125,
        jain_fairness=0.9712345,
        cycles=6,
        wall_seconds=0.42,
    )
    return SimResult(name, samples, jobs, summary, config={"actions": "allocate, reclaim"})


def _empty_result() -> SimResult:
    sample = Sample(0.0, 4.0, 0.0, 0.0, 4.0, 0.0, 0, 0, {})
    nothing = Stats(0, math.nan, math.nan, math.nan, math.nan)
    summary = Summary(0, 0, 0, 0.0, 0.0, 0.0, nothing, nothing, 0, 0.0, 0.0, 1.0, 1, 0.01)
    return SimResult("empty", [sample], [], summary)


def _big_result(n: int = 10_000, queues: int = 6, jobs: int = 2_000) -> SimResult:
    rng = np.random.default_rng(7)
    names = [f"q{k}" for k in range(queues)]
    samples = []
    for i in range(n):
        alloc = float(rng.uniform(20, 64))
        frac = float(rng.uniform(0, 5))
        samples.append(
            Sample(
                time=10.0 * i,
                gpus_total=64.0,
                gpus_allocated=alloc,
                gpus_fractional=frac,
                idle_gpus=64 - alloc,
                fragmentation=float(rng.uniform(0, 0.3)),
                pending_jobs=int(rng.integers(0, 40)),
                running_jobs=int(rng.integers(0, 30)),
                queues={q: QueueSample(alloc / queues, 64 / queues, 10.0, 12.0) for q in names},
            )
        )
    recs = []
    for k in range(jobs):
        arrival = float(rng.uniform(0, 10.0 * n))
        wait = float(rng.exponential(600))
        recs.append(JobRecord(f"j{k}", names[k % queues], 1.0, arrival, 3600.0, arrival + wait, arrival + wait + 3600))
    waits = [j.wait or 0.0 for j in recs]
    jcts = [j.jct or 0.0 for j in recs]
    summary = Summary(jobs, jobs, 0, 10.0 * n, 0.66, 0.04, _stats(waits), _stats(jcts), 0, 0.0, 0.15, 0.99, n, 12.0)
    return SimResult("big", samples, recs, summary)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


class _Checker(HTMLParser):
    """Counts images and inline SVGs, and collects every URL-bearing attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.images = 0
        self.svgs = 0
        self.urls: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images += 1
        if tag == "svg":
            self.svgs += 1
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _check_html(text: str) -> _Checker:
    assert text.startswith("<!DOCTYPE html>")
    assert text.rstrip().endswith("</html>")
    parser = _Checker()
    parser.feed(text)
    parser.close()
    for url in parser.urls:  # embedded images and relative links only
        assert url.startswith("data:image/png;base64,") or not re.match(r"^[a-z]+:", url), url[:80]
    without_data = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    assert "http" not in without_data
    return parser


# ------------------------------------------------------------------------------------------- the files


def test_write_outputs_files(tmp_path: Path) -> None:
    result = _result()
    paths = write_outputs(result, tmp_path / "out")
    assert set(paths) == {"summary.json", "samples.csv", "queues.csv", "jobs.csv", "report.html"}
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 0
        assert p.parent == tmp_path / "out"


def test_samples_csv(tmp_path: Path) -> None:
    result = _result()
    rows = _read_csv(write_outputs(result, tmp_path)["samples.csv"])
    assert len(rows) == len(result.samples)
    assert tuple(rows[0]) == SAMPLES_COLUMNS
    for row, s in zip(rows, result.samples, strict=True):
        assert float(row["time"]) == s.time
        assert float(row["gpus_total"]) == s.gpus_total
        assert float(row["gpus_allocated"]) == s.gpus_allocated
        assert float(row["gpus_fractional"]) == s.gpus_fractional
        assert float(row["allocation_ratio"]) == pytest.approx(s.gpus_allocated / s.gpus_total)
        assert float(row["idle_gpus"]) == s.idle_gpus
        assert float(row["fragmentation"]) == s.fragmentation
        assert int(row["pending_jobs"]) == s.pending_jobs
        assert int(row["running_jobs"]) == s.running_jobs


def test_queues_csv(tmp_path: Path) -> None:
    result = _result()
    rows = _read_csv(write_outputs(result, tmp_path)["queues.csv"])
    assert tuple(rows[0]) == QUEUES_COLUMNS
    expected = [
        (s.time, q, qs) for s in result.samples for q, qs in sorted(s.queues.items())
    ]  # names sort plainly here
    assert len(rows) == len(expected) == 2 * 6 + 4
    for row, (t, q, qs) in zip(rows, expected, strict=True):
        assert float(row["time"]) == t
        assert row["queue"] == q
        assert float(row["allocated"]) == qs.allocated
        assert float(row["fair_share"]) == qs.fair_share
        assert float(row["deserved"]) == qs.deserved  # -1: unlimited, as in the model
        assert float(row["requested"]) == qs.requested


def test_jobs_csv(tmp_path: Path) -> None:
    result = _result()
    rows = _read_csv(write_outputs(result, tmp_path)["jobs.csv"])
    assert tuple(rows[0]) == JOBS_COLUMNS
    assert [r["name"] for r in rows] == [j.name for j in result.jobs]
    by_name = {r["name"]: r for r in rows}
    two = by_name["ns/train-2"]
    assert (two["queue"], float(two["gpus"]), float(two["arrival"])) == ("team-a", 2.0, 60.0)
    assert (float(two["start"]), float(two["end"]), float(two["wait"]), float(two["jct"])) == (660, 2400, 600, 2340)
    evicted = by_name["ns/infer-1"]
    assert (int(evicted["evictions"]), float(evicted["lost_gpu_seconds"])) == (1, 300.0)
    assert float(evicted["gpus"]) == 0.5
    stuck = by_name["ns/stuck"]
    assert stuck["start"] == stuck["end"] == stuck["wait"] == stuck["jct"] == ""
    assert int(stuck["evictions"]) == 0


def test_summary_json(tmp_path: Path) -> None:
    result = _result()
    data = json.loads(write_outputs(result, tmp_path)["summary.json"].read_text(encoding="utf-8"))
    assert data["scenario"] == "two-teams"
    s = data["summary"]
    assert (s["jobs"], s["completed"], s["never_started"], s["evictions"], s["cycles"]) == (4, 3, 1, 1, 6)
    assert s["gpu_allocation_mean"] == 0.8137
    assert s["makespan"] == 3600.0
    assert s["jain_fairness"] == 0.9712  # rounded
    assert s["gpu_hours_lost"] == pytest.approx(300 / 3600, abs=1e-4)
    assert s["wait"]["count"] == 3
    assert s["wait"]["mean"] == pytest.approx(200.0)
    assert s["jct"]["p50"] == pytest.approx(result.summary.jct.p50, abs=0.01)
    assert data["gpus_total"] == 8.0
    assert set(data["queues"]) == {"team-a", "team-b", "team-c"}
    a = data["queues"]["team-a"]
    assert (a["allocated_mean"], a["fair_share_mean"], a["deserved_mean"], a["jobs"], a["completed"]) == (4, 4, 4, 2, 2)
    assert data["queues"]["team-b"]["deserved_unlimited"] is True
    assert data["queues"]["team-b"]["deserved_mean"] is None
    c = data["queues"]["team-c"]
    # the job that never started waits until the end of the run (3600 s, arrived at 1200 s): a lower bound
    assert (c["never_started"], c["wait_mean"], c["wait_censored"], c["jct_mean"]) == (1, 2400.0, 1, None)


def test_report_html(tmp_path: Path) -> None:
    result = _result()
    text = write_outputs(result, tmp_path)["report.html"].read_text(encoding="utf-8")
    parser = _check_html(text)
    assert parser.images + parser.svgs == PLOTS
    assert "two-teams" in "".join(parser.text)
    page = "".join(parser.text)
    for figure in ("81.4 %", "6.2 %", "Jain", "0.971", "1h00m", "12.5 %"):  # allocation, fractional, makespan, ...
        assert figure in page, figure
    for q in ("team-a", "team-b", "team-c"):
        assert q in page
    assert "ns/stuck" in page  # the job that never started is listed


def test_html_escapes_names(tmp_path: Path) -> None:
    result = _result(name="<script>alert(1)</script>")
    text = write_outputs(result, tmp_path)["report.html"].read_text(encoding="utf-8")
    assert "<script>" not in text
    assert "&lt;script&gt;" in text


def test_empty_result(tmp_path: Path) -> None:
    result = _empty_result()
    paths = write_outputs(result, tmp_path)
    assert _read_csv(paths["jobs.csv"]) == []
    assert _read_csv(paths["queues.csv"]) == []
    assert len(_read_csv(paths["samples.csv"])) == 1
    data = json.loads(paths["summary.json"].read_text(encoding="utf-8"))
    assert data["summary"]["wait"] == {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    assert data["queues"] == {}
    parser = _check_html(paths["report.html"].read_text(encoding="utf-8"))
    assert parser.images == PLOTS
    assert "empty" in summary_text(result)


def test_no_samples(tmp_path: Path) -> None:
    result = _empty_result()
    result.samples.clear()
    paths = write_outputs(result, tmp_path)
    assert _read_csv(paths["samples.csv"]) == []
    _check_html(paths["report.html"].read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------- compare


def test_compare(tmp_path: Path) -> None:
    results = [_result(scale=1.0), _result(scale=0.5)]
    labels = ["baseline", "tuned config"]
    paths = compare(results, labels, tmp_path)
    assert {"compare.json", "compare.html"} <= set(paths)
    for d in ("baseline", "tuned_config"):
        for name in ("summary.json", "samples.csv", "queues.csv", "jobs.csv", "report.html"):
            assert paths[f"{d}/{name}"] == tmp_path / d / name
            assert (tmp_path / d / name).is_file()
    data = json.loads(paths["compare.json"].read_text(encoding="utf-8"))
    assert data["labels"] == labels
    metrics = {m["key"]: m for m in data["metrics"]}
    assert metrics["gpu_allocation_mean"]["values"] == [0.8137, 0.4068]
    assert metrics["gpu_allocation_mean"]["best"] == ["baseline"]
    assert metrics["jct_mean"]["best"] == ["tuned config"]  # the shorter JCT of train-2
    assert metrics["evictions"]["best"] == []  # equal: nothing to highlight
    assert set(data["runs"]) == set(labels)

    text = paths["compare.html"].read_text(encoding="utf-8")
    parser = _check_html(text)
    assert parser.images == COMPARE_PLOTS
    page = "".join(parser.text)
    for label in labels:
        assert label in page
    assert 'href="tuned_config/report.html"' in text
    assert text.count('class="best"') >= 2


def test_compare_labels(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="labels"):
        compare([_result()], ["a", "b"], tmp_path)
    with pytest.raises(ValueError, match="nothing"):
        compare([], [], tmp_path)
    paths = compare([_result(), _result(), _result()], ["a b", "a/b", "run"], tmp_path)
    for d in ("a_b", "a_b-2", "run"):
        assert paths[f"{d}/report.html"] == tmp_path / d / "report.html"
        assert (tmp_path / d / "report.html").is_file()


def test_compare_with_empty_run(tmp_path: Path) -> None:
    paths = compare([_result(), _empty_result()], ["full", "empty"], tmp_path)
    _check_html(paths["compare.html"].read_text(encoding="utf-8"))
    assert "empty" in compare_text([_result(), _empty_result()], ["full", "empty"])


# ------------------------------------------------------------------------------------------- the text


def test_summary_text() -> None:
    text = summary_text(_result(), width=1000)
    lines = text.splitlines()
    assert lines[0].startswith("two-teams: 3 of 4 jobs completed, 1 never started · 8 GPUs")
    assert lines[1].startswith(
        "GPU allocation 81.4 % (fractional 6.2 %) · JCT mean 43m p95 58m · wait mean 3m20s p95 9m00s"
        " · makespan 1h00m · 1 eviction, 0.1 GPU-hours lost · fragmentation 12.5 % · Jain 0.97"
        " · JCT and makespan are over the 3 completed jobs"
    )
    assert any(line.strip().startswith("team-b") and "deserved ∞" in line for line in lines)


def test_compare_text() -> None:
    text = compare_text([_result(), _result(scale=0.5)], ["base", "half"])
    lines = text.splitlines()
    assert lines[0] == "two-teams: 2 runs compared (base, half)"
    assert lines[1].split() == ["base", "half"]
    alloc = next(line for line in lines if line.startswith("GPU allocation"))
    assert "81.4 % *" in alloc and "40.7 %" in alloc
    assert "* best of the row" in lines
    assert lines[-2:] == ["base: 3 of 4 jobs completed, 1 never started",
                          "half: 3 of 4 jobs completed, 1 never started"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "n/a"),
        (0.0, "0s"),
        (4.5, "4.5s"),
        (42.4, "42s"),
        (59.7, "1m00s"),
        (307, "5m07s"),
        (720, "12m"),
        (3599.9, "1h00m"),
        (3900, "1h05m"),
        (2 * 3600 + 13 * 60, "2h13m"),
        (25 * 3600 + 40 * 60, "25h40m"),
        (3 * 86400 + 4 * 3600, "3d04h"),
        (math.inf, "∞"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_downsample_keeps_means() -> None:
    t = np.arange(10_000, dtype=np.float64)
    v = np.where(t % 2 == 0, 1.0, 3.0)
    gaps = v.copy()
    gaps[:5000] = np.nan
    tt, vv, gg = downsample(t, v, gaps, max_points=1000)  # buckets of 10
    assert len(tt) == len(vv) == len(gg) == 1000
    assert tt[0] == 0 and np.all(np.diff(tt) > 0)
    assert np.allclose(vv, 2.0)
    assert np.isnan(gg[:500]).all() and np.allclose(gg[500:], 2.0)
    small = np.arange(5, dtype=np.float64)
    assert downsample(small, small)[1] is small


def test_render_time_10k_samples(tmp_path: Path) -> None:
    result = _big_result()
    began = time.perf_counter()
    paths = write_outputs(result, tmp_path)
    elapsed = time.perf_counter() - began
    assert elapsed < 15  # a few seconds in practice; loose for slow CI machines
    assert len(_read_csv(paths["samples.csv"])) == 10_000
    parser = _check_html(paths["report.html"].read_text(encoding="utf-8"))
    assert parser.images == PLOTS


def test_queues_in_natural_order(tmp_path: Path) -> None:
    qs = QueueSample(1.0, 1.0, 1.0, 1.0)
    result = _empty_result()
    result.samples[0] = Sample(0.0, 4.0, 3.0, 0.0, 1.0, 0.0, 0, 3, {"q10": qs, "q2": qs, "a": qs})
    paths = write_outputs(result, tmp_path)
    assert [r["queue"] for r in _read_csv(paths["queues.csv"])] == ["a", "q2", "q10"]
    assert list(json.loads(paths["summary.json"].read_text(encoding="utf-8"))["queues"]) == ["a", "q2", "q10"]


def test_long_tailed_waits_use_a_log_axis(tmp_path: Path) -> None:
    from kaisched.sim.report import _DurationAxis

    assert _DurationAxis.of([0.0] * 50 + [36_000.0]).log
    assert not _DurationAxis.of([600.0, 1200.0, 1800.0]).log
    result = _result()
    result.jobs += [JobRecord(f"ns/quick-{k}", "team-a", 1.0, 0.0, 60.0, 0.0, 60.0) for k in range(20)]
    result.jobs.append(JobRecord("ns/slow", "team-b", 1.0, 0.0, 60.0, 36_000.0, 36_060.0))
    _check_html(write_outputs(result, tmp_path)["report.html"].read_text(encoding="utf-8"))
