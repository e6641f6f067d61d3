"""Reading objects from YAML/JSON files and directories (kaisched.k8s.loader)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kaisched.k8s import load_documents, load_objects
from kaisched.k8s.loader import DEFAULT_MAX_INPUT_BYTES, DEFAULT_WAIT_SECONDS, InputLimitError, InputLimits

NODE_YAML = """\
apiVersion: v1
kind: Node
metadata:
  name: {name}
status:
  capacity: {{cpu: "8", memory: 32Gi, nvidia.com/gpu: "4"}}
"""

POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  creationTimestamp: 2024-01-01T00:00:00Z
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    resources:
      requests: {{cpu: 500m, nvidia.com/gpu: 1}}
"""

QUEUE_YAML = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {name}
spec:
  resources:
    gpu: {{quota: 2, overQuotaWeight: 1, limit: -1}}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_multi_document_yaml(tmp_path: Path) -> None:
    text = "---\n" + NODE_YAML.format(name="n1") + "---\n# only a comment\n---\n" + POD_YAML.format(name="p1") + "---\n"
    path = write(tmp_path / "cluster.yaml", text)
    docs, errors = load_documents([path])
    assert errors == []
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("Node", "n1"), ("Pod", "p1")]


def test_directories_are_read_recursively_in_path_order(tmp_path: Path) -> None:
    write(tmp_path / "b" / "queue.yml", QUEUE_YAML.format(name="q1"))
    write(tmp_path / "a" / "z.yaml", NODE_YAML.format(name="n1"))
    write(tmp_path / "a" / "nested" / "deep.json", json.dumps({"kind": "X"}))
    write(tmp_path / "c.JSON", json.dumps([{"kind": "Y"}, {"kind": "Z"}]))
    write(tmp_path / "README.md", "kind: Ignored")
    write(tmp_path / "notes.txt", "kind: Ignored")
    docs, errors = load_documents([tmp_path])
    assert errors == []
    # a/nested/deep.json < a/z.yaml < b/queue.yml < c.JSON
    assert [d["kind"] for d in docs] == ["X", "Node", "Queue", "Y", "Z"]


def test_json_single_object_and_list(tmp_path: Path) -> None:
    one = write(tmp_path / "one.json", json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}))
    many = write(tmp_path / "many.json", json.dumps([{"kind": "A"}, None, {"kind": "B"}]))
    docs, errors = load_documents([one, many])
    assert errors == []
    assert [d["kind"] for d in docs] == ["Node", "A", "B"]


def test_an_explicit_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    path = write(tmp_path / "objects.txt", NODE_YAML.format(name="n1"))
    docs, errors = load_documents([str(path)])
    assert errors == [] and docs[0]["metadata"]["name"] == "n1"


def test_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", NODE_YAML.format(name="n1") + "---\nkind: Pod\nmetadata: {name: [unclosed\n")
    good = write(tmp_path / "good.yaml", NODE_YAML.format(name="n2"))
    docs, errors = load_documents([bad, good])
    assert [d["metadata"]["name"] for d in docs] == ["n1", "n2"]  # documents before the error are kept
    (error,) = errors
    assert error.object == f"file {bad}"
    assert error.field == ""
    assert error.message == (
        "invalid YAML at line 10, column 1 (document 2): "
        "while parsing a flow sequence: did not find expected ',' or ']'"
    )


def test_yaml_error_line_number(tmp_path: Path) -> None:
    path = write(tmp_path / "indent.yaml", "kind: Pod\nmetadata:\n  name: a\n   bad: indentation\n")
    _, errors = load_documents([path])
    (error,) = errors
    assert error.message.startswith("invalid YAML at line 4, column 7 (document 1): mapping values are not allowed")


def test_invalid_json(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.json", '{\n  "kind": "Pod",\n  "metadata": {\n}\n')
    docs, errors = load_documents([path])
    assert docs == []
    (error,) = errors
    assert (error.object, error.field) == (f"file {path}", "")
    assert error.message.startswith("invalid JSON at line")


def test_missing_path_is_an_error_and_the_others_are_read(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", NODE_YAML.format(name="n1"))
    missing = tmp_path / "missing.yaml"
    docs, errors = load_documents([missing, good])
    assert len(docs) == 1
    assert [e.to_dict() for e in errors] == [
        {"object": f"file {missing}", "field": "", "message": "no such file or directory"}
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: Pod\nmetadata: {name: caf\xe9}\n")
    docs, errors = load_documents([path])
    assert docs == []
    (error,) = errors
    assert error.object == f"file {path}"
    assert error.message.startswith("cannot read file")


def test_documents_that_are_not_objects(tmp_path: Path) -> None:
    path = write(tmp_path / "odd.yaml", "just a string\n---\n- kind: A\n- 3\n---\nkind: B\n")
    docs, errors = load_documents([path])
    assert [d["kind"] for d in docs] == ["A", "B"]  # a list document contributes its items
    assert [e.message for e in errors] == [
        "document 1: expected an object (a mapping), got a string",
        "document 2, item 1: expected an object (a mapping), got a number",
    ]


def test_empty_files_and_directories(tmp_path: Path) -> None:
    write(tmp_path / "empty.yaml", "")
    write(tmp_path / "blank.yml", "\n# nothing\n---\n")
    (tmp_path / "empty-dir").mkdir()
    docs, errors = load_documents([tmp_path, tmp_path / "empty-dir"])
    assert docs == [] and errors == []


def test_load_objects_parses_and_merges_errors(tmp_path: Path) -> None:
    write(tmp_path / "1-nodes.yaml", NODE_YAML.format(name="n1") + "---\n" + NODE_YAML.format(name="n2"))
    write(tmp_path / "2-pods.yaml", POD_YAML.format(name="p1") + "---\n" + POD_YAML.format(name="p1"))
    write(tmp_path / "3-queues.yaml", QUEUE_YAML.format(name="q1"))
    write(tmp_path / "4-broken.yaml", "kind: [\n")
    parsed = load_objects([tmp_path, tmp_path / "nope.yaml"])
    assert [n.meta.name for n in parsed.nodes] == ["n1", "n2"]
    assert [p.meta.name for p in parsed.pods] == ["p1"]
    assert [q.meta.name for q in parsed.queues] == ["q1"]
    pod = parsed.pods[0]
    assert pod.meta.creation_timestamp == datetime(2024, 1, 1, tzinfo=UTC)  # unquoted YAML timestamp
    assert pod.containers[0].requests == {"cpu": 500.0, "nvidia.com/gpu": 1.0}
    assert parsed.nodes[0].allocatable["memory"] == 32 * 2**30
    # file errors first, then object errors
    assert [(e.object, e.field) for e in parsed.errors] == [
        (f"file {tmp_path / '4-broken.yaml'}", ""),
        (f"file {tmp_path / 'nope.yaml'}", ""),
        ("Pod ml/p1", "metadata.name"),
    ]


KUBECTL_LIST_YAML = """\
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: n1
  status:
    allocatable: {cpu: 7500m, memory: 30Gi}
    capacity: {cpu: "8", memory: 32Gi}
- apiVersion: v1
  kind: Pod
  metadata:
    name: p1
    namespace: ml
    creationTimestamp: "2024-01-01T00:00:00Z"
  spec:
    containers:
    - name: main
      resources:
        requests: {cpu: "2"}
  status:
    phase: Pending
"""


def test_kubectl_list_output(tmp_path: Path) -> None:
    parsed = load_objects([write(tmp_path / "list.yaml", KUBECTL_LIST_YAML)])
    assert parsed.errors == []
    assert [(n.meta.name, n.allocatable["cpu"]) for n in parsed.nodes] == [("n1", 7500.0)]
    assert [(p.meta.name, p.containers[0].requests["cpu"]) for p in parsed.pods] == [("p1", 2000.0)]


def test_dash_reads_standard_input_in_its_place_among_the_paths(tmp_path: Path) -> None:
    before = write(tmp_path / "a.yaml", NODE_YAML.format(name="n1"))
    after = write(tmp_path / "b.yaml", NODE_YAML.format(name="n3"))
    stdin = io.StringIO(NODE_YAML.format(name="n2") + "---\n" + POD_YAML.format(name="p1"))
    docs, errors = load_documents([before, "-", after], stdin=stdin)
    assert errors == []
    assert [d["metadata"]["name"] for d in docs] == ["n1", "n2", "p1", "n3"]


def test_standard_input_defaults_to_sys_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(QUEUE_YAML.format(name="q1")))
    parsed = load_objects(["-"])
    assert parsed.errors == [] and [q.meta.name for q in parsed.queues] == ["q1"]


def test_standard_input_is_read_once() -> None:
    stdin = io.StringIO(NODE_YAML.format(name="n1"))
    docs, errors = load_documents(["-", "-"], stdin=stdin)
    assert errors == [] and len(docs) == 1  # the second '-' finds it at its end


def test_standard_input_holds_json_a_json_list_or_a_kind_list() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    for text in (json.dumps(node), json.dumps([node, None]), json.dumps({"kind": "List", "items": [node]}, indent=2),
                 "\n  " + json.dumps(node)):
        parsed = load_objects(["-"], stdin=io.StringIO(text))
        assert parsed.errors == [], text
        assert [n.meta.name for n in parsed.nodes] == ["n1"]
    parsed = load_objects(["-"], stdin=io.StringIO(KUBECTL_LIST_YAML))  # kubectl get -o yaml
    assert parsed.errors == [] and [p.meta.name for p in parsed.pods] == ["p1"]


def test_flow_style_yaml_on_standard_input_is_not_taken_for_json() -> None:
    docs, errors = load_documents(["-"], stdin=io.StringIO("{kind: Node, metadata: {name: n1}}\n---\nkind: Pod\n"))
    assert errors == []
    assert [d["kind"] for d in docs] == ["Node", "Pod"]


def test_errors_on_standard_input_name_it() -> None:
    _, errors = load_documents(["-"], stdin=io.StringIO('{"kind": "Node",\n "metadata": {"name": "n1"}\n'))
    assert [e.to_dict() for e in errors] == [{"object": "standard input", "field": "",
                                              "message": "invalid JSON at line 3, column 1: Expecting ',' delimiter"}]
    _, errors = load_documents(["-"], stdin=io.StringIO("kind: Pod\nmetadata:\n  name: a\n   bad: x\n"))
    (error,) = errors
    assert error.object == "standard input"
    assert error.message.startswith("invalid YAML at line 4, column 7 (document 1)")
    _, errors = load_documents(["-"], stdin=io.StringIO("- 3\n"))
    assert [(e.object, e.message) for e in errors] == [
        ("standard input", "document 1, item 0: expected an object (a mapping), got a number")]


def test_unreadable_standard_input() -> None:
    closed = io.StringIO("kind: Node")
    closed.close()
    docs, errors = load_documents(["-"], stdin=closed)
    assert docs == []
    (error,) = errors
    assert (error.object, error.field) == ("standard input", "")
    assert error.message.startswith("cannot read: ")


def test_standard_input_that_is_not_utf8() -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"\xff\xfe\x00bad"), encoding="utf-8", errors="surrogateescape")
    docs, errors = load_documents(["-"], stdin=stdin)
    assert docs == []
    assert [e.to_dict() for e in errors] == [{
        "object": "standard input", "field": "",
        "message": "cannot read: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"}]


def test_a_file_named_dash_inside_a_directory_is_a_file(tmp_path: Path) -> None:
    write(tmp_path / "-", NODE_YAML.format(name="n1"))
    docs, errors = load_documents([tmp_path / "-"], stdin=io.StringIO("kind: Ignored"))
    assert errors == [] and [d["metadata"]["name"] for d in docs] == ["n1"]


# ------------------------------------------------------------------------------------------- bounded input
def test_a_file_larger_than_the_limit_is_refused_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path / "big.yaml", NODE_YAML.format(name="n1"))
    size = path.stat().st_size
    docs, errors = load_documents([path], limits=InputLimits(max_bytes=size))  # exactly the limit: read
    assert errors == [] and len(docs) == 1
    with pytest.raises(InputLimitError) as caught:
        load_documents([path], limits=InputLimits(max_bytes=size - 1))
    assert str(caught.value) == (f"file {path}: larger than {size - 1:,} bytes (the input limit: --max-input-bytes "
                                 "or KAISCHED_MAX_INPUT_BYTES)")


def test_the_limit_is_over_all_the_paths_of_one_read(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", NODE_YAML.format(name="n1"))
    b = write(tmp_path / "b.yaml", NODE_YAML.format(name="n2"))
    limits = InputLimits(max_bytes=a.stat().st_size + b.stat().st_size - 1)
    with pytest.raises(InputLimitError, match=rf"^file {b}: the input is larger than .* in total \("):
        load_documents([a, b], limits=limits)
    assert len(load_documents([a], limits=limits)[0]) == 1


def test_a_character_device_is_read_in_chunks_up_to_the_limit() -> None:
    with pytest.raises(InputLimitError, match=r"^file /dev/zero: larger than 3,000,000 bytes"):
        load_objects(["/dev/zero"], limits=InputLimits(max_bytes=3_000_000))


def test_standard_input_is_bounded_too() -> None:
    text = NODE_YAML.format(name="n1")
    with pytest.raises(InputLimitError, match=r"^standard input: larger than 10 bytes"):
        load_documents(["-"], stdin=io.StringIO(text), limits=InputLimits(max_bytes=10))
    binary = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8")
    with pytest.raises(InputLimitError, match=r"^standard input: larger than 10 bytes"):
        load_documents(["-"], stdin=binary, limits=InputLimits(max_bytes=10))
    assert len(load_documents(["-"], stdin=io.StringIO(text), limits=InputLimits(max_bytes=len(text)))[0]) == 1


def test_a_fifo_without_a_writer_is_refused_after_the_wait(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(InputLimitError) as caught:
        load_documents([fifo], limits=InputLimits(wait_seconds=0.3))
    assert 0.25 < time.monotonic() - started < 5
    assert str(caught.value) == (f"file {fifo}: a FIFO that no program writes to: nothing came in 0.3 s (start the "
                                 "writer first, or wait longer with KAISCHED_INPUT_TIMEOUT=SECONDS)")


@pytest.mark.parametrize("delay", [0.0, 0.2])
def test_a_fifo_is_read_to_its_end_when_a_writer_comes(tmp_path: Path, delay: float) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    text = NODE_YAML.format(name="n1") + "---\n" + NODE_YAML.format(name="n2")

    def writer() -> None:
        time.sleep(delay)
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(text[:40])
            f.flush()
            time.sleep(0.2)  # a slow writer is waited for, once it is there
            f.write(text[40:])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        docs, errors = load_documents([fifo], limits=InputLimits(wait_seconds=5))
    finally:
        thread.join()
    assert errors == [] and [d["metadata"]["name"] for d in docs] == ["n1", "n2"]


def test_a_fifo_over_the_limit_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def writer() -> None:
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as f:
            f.write(b"#" * 200_000)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with pytest.raises(InputLimitError, match=r"larger than 100,000 bytes"):
            load_documents([fifo], limits=InputLimits(max_bytes=100_000, wait_seconds=5))
    finally:
        thread.join()


def test_a_writer_that_closes_without_writing_is_an_empty_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def writer() -> None:
        time.sleep(0.1)
        open(fifo, "wb").close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert load_documents([fifo], limits=InputLimits(wait_seconds=5)) == ([], [])
    finally:
        thread.join()


def test_limits_from_the_environment() -> None:
    assert InputLimits.from_env({}) == InputLimits(DEFAULT_MAX_INPUT_BYTES, DEFAULT_WAIT_SECONDS)
    assert InputLimits.from_env({"KAISCHED_MAX_INPUT_BYTES": "2Gi", "KAISCHED_INPUT_TIMEOUT": "1.5"}) == \
        InputLimits(2 << 30, 1.5)
    assert InputLimits.from_env({"KAISCHED_MAX_INPUT_BYTES": "2Gi"}, max_bytes=100).max_bytes == 100  # option wins
    with pytest.raises(ValueError, match=r"^KAISCHED_MAX_INPUT_BYTES: expected a number of bytes >= 1 like "
                                         r"1073741824 or 1Gi, got 'lots'$"):
        InputLimits.from_env({"KAISCHED_MAX_INPUT_BYTES": "lots"})
    with pytest.raises(ValueError, match=r"^KAISCHED_INPUT_TIMEOUT: expected a number of seconds > 0"):
        InputLimits.from_env({"KAISCHED_INPUT_TIMEOUT": "-1"})
    with pytest.raises(ValueError, match="max_bytes"):
        InputLimits(max_bytes=0)


def test_the_default_limit_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "a.yaml", NODE_YAML.format(name="n1"))
    monkeypatch.setenv("KAISCHED_MAX_INPUT_BYTES", "10")
    with pytest.raises(InputLimitError, match="larger than 10 bytes"):
        load_objects([path])
