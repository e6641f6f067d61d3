"""Docs as tests: every command and snippet of README.md and docs/*.md runs as written, from the repository root.

How a page is read is in ``tests/docs/extract.py``: shell commands of ``sh``/``bash``/``shell``/``console``
blocks (one test per command line), ``python`` blocks (one test per snippet), ``kaisched ...`` spans in prose,
and the output a page shows (a ``text`` block right after a command block, or the lines after a ``$ `` command
in a ``console`` block).

Each documented command is run, checked without running, or listed in ``NOT_RUN``:

* **Run**: commands of ``kaisched``, ``python`` and ``source`` (a user who ran ``source .venv/bin/activate``),
  with ``bash -o pipefail -c`` (snippets with ``.venv/bin/python``) in a scratch directory that links to the
  repository's sources and ``examples/`` (so ``-o sim-out`` writes there, never into the checkout), with the
  virtual environment's ``bin`` first on ``PATH`` and ``COLUMNS=120``. The exit status must be 0, unless an
  HTML comment ``<!-- exit: N -->`` just before the block documents another (``kaisched schedule -f
  examples/cluster.yaml`` exits 1 on purpose: the example holds a PodGroup in an unknown queue); the status
  applies to every command of that block. Shown output must appear in the actual output (stdout and stderr),
  line by line and in order, compared with white space collapsed and table borders removed; a line ``...``
  stands for lines left out.
* **Checked**: ``kubectl apply -f`` / ``kubectl delete -f`` need a cluster, but the files they name must exist
  and parse as Kubernetes objects; files under ``examples/`` applied on a page are scheduled together with
  ``kaisched schedule`` (each apply adds to what the page applied before) and must give no input errors.
* **Not run**: the commands ``NOT_RUN`` lists, each with its reason. Every repository path they name must exist,
  and a ``make`` target must exist (``make -n``). The test then reports them as skipped, with the reason.

A command that is none of these fails the test: a new page or command cannot land untested. Every entry of
``NOT_RUN`` must still match a documented command. Besides, every ``yaml`` and ``json`` block must parse, and a
``yaml`` block marked ``<!-- file: PATH -->`` must hold the same objects as that file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.docs.extract import Block, Command, page_commands, read_blocks, shell_commands

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# The user's activated virtual environment: the checkout's .venv (what `make run` makes), else the suite's own.
VENV_BIN = ROOT / ".venv" / "bin" if (ROOT / ".venv" / "bin" / "kaisched").exists() else Path(sys.executable).parent
TIMEOUT_S = 180
NOW = "2026-01-01T02:00:00Z"

# The one list of documented commands the suite does not run: (pattern matched against the command, reason).
NOT_RUN: tuple[tuple[str, str], ...] = (
    (r"^make test$", "runs this whole suite and more (the compiled core, benchmarks, a real kube-apiserver): "
                     "about 15 minutes"),
    (r"^make run$", "sets up .venv (it would reinstall it whenever pyproject.toml changed); its commands are the "
                    "documented ones run here one by one"),
    (r"^make compiled$", "compiles the core with mypyc: about 1.5 minutes (tests/compiled builds and checks it)"),
    (r"^make fuzz( |$)", "the nightly search: every property test with fresh random examples for FUZZ_MINUTES minutes "
                         "(30 by default); the suite runs the same tests derandomized"),
    (r"^PYTHONPATH=build/compiled ", "needs the compiled core of `make compiled`; tests/compiled checks that it "
                                     "decides as the sources do"),
    (r"^(KAISCHED_PURE_PYTHON=1 )?pip wheel ", "builds a wheel, compiling the core with mypyc (minutes); "
                                               "tests/compiled builds and checks one"),
    (r"^docker (build|push) ", "needs a Docker daemon and a registry; the build compiles the core (minutes)"),
    (r"^helm (install|uninstall) ", "needs a Kubernetes cluster (tests/unit/test_deploy.py renders the chart)"),
    (r"^kubectl (?!apply -f|delete -f)", "needs a Kubernetes cluster with kaisched running in it"),
    (r"^curl ", "asks the metrics port of a kaisched running in a cluster"),
    (r"^\.venv/bin/python -m benchmarks\.simulator --part openb-experiment$", "the OpenB experiment: ten seeds of "
     "about 9,000 pods on 1,213 nodes per placement (about 10 minutes); tests/sim/test_openb.py checks the harness"),
    (r"^make compiled && PYTHONPATH=build/compiled ", "compiles the core, then a 5,000-node benchmark (minutes); "
     "make test runs the benchmark's --smoke"),
    (r"^\.venv/bin/python -m benchmarks\.kube_scale --nodes ", "starts a kube-apiserver and binds thousands of pods "
     "(minutes; exit 1 when a target is missed); make test runs its --smoke"),
    (r"^kaisched explain .*--scheduler ", "asks a running kaisched run; tests/kube/test_explain_contract.py asks "
     "one on a real kube-apiserver, tests/unit/test_explain_remote.py checks the answer against the cycle's"),
    (r"^kaisched (explain|get|schedule) .*--kubeconfig ~/\.kube/config", "reads a live cluster; "
     "tests/kube/test_explain_docs_contract.py runs these on a real kube-apiserver holding examples/explain.yaml "
     "and checks the output shown"),
)
RUNNABLE = frozenset({"kaisched", ".venv/bin/kaisched", "python", "python3", ".venv/bin/python", "source"})
# What the scratch directory links to (so that commands find the files the docs name).
LINKED = ("examples", "deploy", "docs", "scripts", "benchmarks", "src", "tests", "requirements", ".venv", "Makefile",
          "pyproject.toml", "Dockerfile", "hatch_build.py", "README.md")
TOP_LEVEL = tuple(name for name in LINKED if name != ".venv")
PATH_OPTIONS = ("-f", "--filename", "--config", "--compare")
BORDERS = re.compile(r"[\u2500-\u257f]")


def commands() -> list[Command]:
    return [command for page in PAGES for command in page_commands(page)]


def ident(command: Command) -> str:
    return f"{command.page.relative_to(ROOT)}:{command.line}"


def classify(source: str) -> tuple[str, str]:
    """``("run" | "check" | "not-run" | "unknown", reason)`` for a documented shell command."""
    for pattern, reason in NOT_RUN:
        if re.search(pattern, source):
            return "not-run", reason
    words = shlex.split(source, comments=False)
    program = next((word for word in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word)), "")
    if program == "kubectl" and words[1:3] in (["apply", "-f"], ["delete", "-f"]):
        return "check", ""
    if program in RUNNABLE:
        return "run", ""
    return "unknown", ""


def named_paths(source: str) -> list[str]:
    """The repository paths a command names: arguments of ``-f``/``--filename``/``--config``/``--compare`` and any
    word starting with a top-level entry of the repository (``examples/``, ``deploy/``, ...)."""
    words = shlex.split(source.replace(";", " "), comments=False)
    found: list[str] = []
    for position, word in enumerate(words):
        before = words[max(position - 2, 0):position]
        argument = bool(before) and (before[-1] in PATH_OPTIONS or before[0] == "--compare")  # --compare A B
        if word == "-" and argument:
            continue  # standard input
        if argument or (word.split("/")[0] in TOP_LEVEL and not word.startswith("-")):
            found.append(word)
    return found


def normalise(line: str) -> str:
    return " ".join(BORDERS.sub(" ", line).split())


def missing_lines(shown: tuple[str, ...], actual: str) -> list[str]:
    """The shown lines not found, in order, among the actual output's lines."""
    lines = [normalise(line) for line in actual.splitlines()]
    position = 0
    missing: list[str] = []
    for raw in shown:
        want = normalise(raw)
        if not want or want in ("...", "…"):
            continue
        try:
            position = lines.index(want, position) + 1
        except ValueError:
            missing.append(raw)
    return missing


@dataclass(frozen=True)
class Outcome:
    status: int
    output: str


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory that looks like the repository root to the documented commands."""
    path = tmp_path_factory.mktemp("docs")
    for name in LINKED:
        if (ROOT / name).exists():
            (path / name).symlink_to(ROOT / name)
    return path


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("KAISCHED_DEBUG", "FORCE_COLOR")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env["COLUMNS"] = "120"
    env["NO_COLOR"] = "1"
    env["TERM"] = "dumb"
    if env.get("PYTHONPATH"):  # e.g. build/compiled: the same core as the suite, from the scratch directory
        env["PYTHONPATH"] = os.pathsep.join(str(ROOT / part) for part in env["PYTHONPATH"].split(os.pathsep))
    return env


@cache
def run(kind: str, source: str, cwd: Path) -> Outcome:
    """Run a documented command once per session (the same command on two pages is run once)."""
    argv = [str(VENV_BIN / "python"), "-c", source] if kind == "python" else ["bash", "-o", "pipefail", "-c", source]
    try:
        done = subprocess.run(argv, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish in {TIMEOUT_S} s: give the doc a smaller example or list it in NOT_RUN")
    return Outcome(done.returncode, done.stdout + done.stderr)


def check_paths(command: Command) -> None:
    missing = [path for path in named_paths(command.source) if not (ROOT / path).exists()]
    if missing:
        pytest.fail(f"{ident(command)}: `{command.source}` names files that do not exist: {missing}", pytrace=False)


def kubernetes_documents(path: Path) -> Iterator[dict[str, object]]:
    files = sorted(path.rglob("*.y*ml")) if path.is_dir() else [path]
    assert files, f"{path} holds no YAML files"
    for file in files:
        for document in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            if document is not None:
                yield document


def applied_examples(command: Command) -> list[str]:
    """The files under examples/ that the page applied with kubectl up to and including ``command``."""
    found: list[str] = []
    for earlier in page_commands(command.page):
        if earlier.line > command.line:
            break
        if earlier.source.startswith("kubectl apply -f"):
            found.extend(path for path in named_paths(earlier.source) if path.startswith("examples/"))
    return found


def check_without_running(command: Command, cwd: Path) -> None:
    for path in named_paths(command.source):
        for document in kubernetes_documents(ROOT / path):
            assert isinstance(document, dict) and document.get("apiVersion") and document.get("kind"), (
                f"{path}: every document must be a Kubernetes object (apiVersion and kind)")
    examples = applied_examples(command)
    if command.source.startswith("kubectl apply") and examples:
        source = " ".join(["kaisched schedule", *(f"-f {path}" for path in examples), f"--now {NOW} -o json"])
        outcome = run("shell", source, cwd)
        assert outcome.status == 0, f"`{source}` exited {outcome.status}:\n{outcome.output}"
        errors = json.loads(outcome.output)["errors"]
        assert errors == [], f"the files applied so far on this page have input errors: {errors}"


def check_make_target(source: str) -> None:
    target = source.split()[1]
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.returncode == 0, f"`make {target}` is not a target of the Makefile: {done.stderr}"


COMMANDS = commands()


@pytest.mark.parametrize("command", [pytest.param(command, id=ident(command), marks=(
    [pytest.mark.slow] if "simulate" in command.source else [])) for command in COMMANDS])
def test_documented_command(command: Command, workdir: Path) -> None:
    if command.kind == "python":
        outcome = run("python", command.source, workdir)
    else:
        check_paths(command)
        action, reason = classify(command.source)
        if action == "unknown":
            pytest.fail(f"{ident(command)}: `{command.source}` is neither run by the doc tests nor in NOT_RUN "
                        "(tests/docs/test_documented_commands.py); make it runnable or add it with a reason")
        if action == "check":
            check_without_running(command, workdir)
            return
        if action == "not-run":
            if command.source.startswith("make "):
                check_make_target(command.source)
            pytest.skip(f"not run: {reason}")
        outcome = run("shell", command.source, workdir)
    if outcome.status != command.exit_status:
        pytest.fail(f"{ident(command)}: `{command.source.strip()}` exited {outcome.status}, the page documents "
                    f"{command.exit_status}:\n{outcome.output[-4000:]}", pytrace=False)
    if command.output is not None:
        missing = missing_lines(command.output, outcome.output)
        if missing:
            pytest.fail(f"{ident(command)}: the output the page shows is not what `{command.source.strip()}` "
                        f"prints; not found (in order): {missing}\nactual output:\n{outcome.output[-6000:]}",
                        pytrace=False)


def data_blocks() -> list[Block]:
    return [block for page in PAGES for block in read_blocks(page) if block.language in ("yaml", "json")]


@pytest.mark.parametrize("block", [pytest.param(block, id=f"{block.page.relative_to(ROOT)}:{block.line}")
                                   for block in data_blocks()])
def test_yaml_and_json_blocks_parse(block: Block) -> None:
    if block.language == "json":
        json.loads(block.text)
        return
    documents = [document for document in yaml.safe_load_all(block.text) if document is not None]
    assert documents, "an empty YAML block"
    if "file" in block.markers:
        path = ROOT / block.markers["file"]
        assert path.is_file(), f"the block says it is {block.markers['file']}, which does not exist"
        shipped = [document for document in yaml.safe_load_all(path.read_text(encoding="utf-8")) if document]
        assert documents == shipped, f"the block and {block.markers['file']} hold different objects"


def headings(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (lower case, punctuation dropped, '-' for spaces)."""
    anchors: set[str] = set()
    fence = ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(("```", "~~~")):
            fence = "" if fence else line[:3]
        elif not fence and (match := re.match(r"^#{1,6}\s+(.*?)\s*$", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", match[1].lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", [pytest.param(page, id=str(page.relative_to(ROOT))) for page in PAGES])
def test_named_files_and_links_exist(page: Path) -> None:
    """Every repository path a page names in code (`examples/...`, `src/...`) exists, and every relative link
    (with its #anchor, for a Markdown page) leads somewhere."""
    text = page.read_text(encoding="utf-8")
    missing: list[str] = []
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        for word in span[1].split():
            path = word.rstrip(".,:;)").split("#")[0]
            if (path.split("/")[0] in TOP_LEVEL and "/" in path and not re.search(r"[<>*{}\[\]…]", path)
                    and not (ROOT / path).exists()):
                missing.append(f"`{word}`")
    for link in re.finditer(r"\]\(([^)\s]+)\)", text):
        target, _, anchor = link[1].partition("#")
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = (page.parent / target) if target else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in headings(path)):
            missing.append(link[1])
    assert not missing, f"{page.relative_to(ROOT)} names paths or anchors that do not exist: {missing}"


def test_every_not_run_entry_is_used() -> None:
    """The allow-list stays as short as the docs need: each entry matches a documented command."""
    sources = [command.source for command in COMMANDS if command.kind == "shell"]
    unused = [pattern for pattern, _ in NOT_RUN if not any(re.search(pattern, source) for source in sources)]
    assert not unused, f"NOT_RUN entries that match no documented command: {unused}"


def test_every_page_has_commands_checked() -> None:
    """README.md and every page under docs/ are read (a page without commands is fine, a missing page is not)."""
    assert {page.name for page in PAGES} >= {"README.md", "install.md", "simulator.md", "workloads.md"}
    assert all(page.is_file() for page in PAGES)


def test_readme_starts_with_set_up_and_says_how_to_run_kaisched() -> None:
    """README.md opens with the two set-up commands, then says how to reach `kaisched` (the venv)."""
    first = read_blocks(ROOT / "README.md")[0]
    assert first.line == 1, "README.md must start with the set-up block"
    assert [source for _, source, _ in shell_commands(first)] == ["make run", "make test"]
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    after = text.split("```", 2)[2][:1500]
    assert "source .venv/bin/activate" in after and ".venv/bin/kaisched" in after


# The extractor's rules, on small pages.

def write_page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_extractor_reads_comments_continuations_markers_and_output(tmp_path: Path) -> None:
    page = write_page(tmp_path, "\n".join([
        "# Title", "", "<!-- exit: 1 -->", "```sh", "# a comment line", "kaisched schedule -f a.yaml   # why",
        "kaisched schedule \\", "    # explained here", "  -f 'b #1.yaml' -o json", "```", "", "```text",
        "line one", "```", "", "Try `kaisched schedule -f c.yaml`, not `kaisched run` or `kaisched run [--x]`.",
        "```console", "$ kaisched --version", "kaisched, version 0.1.0", "```", "```python", "print(1)", "```",
        "prose", "```text", "1", "```", "A span across lines: `kaisched schedule", "-f d.yaml`.", ""]))
    found = page_commands(page)
    assert [(c.line, c.kind, c.source, c.exit_status, c.output) for c in found] == [
        (6, "shell", "kaisched schedule -f a.yaml", 1, None),
        (7, "shell", "kaisched schedule -f 'b #1.yaml' -o json", 1, ("line one",)),
        (16, "shell", "kaisched schedule -f c.yaml", 0, None),
        (18, "shell", "kaisched --version", 0, ("kaisched, version 0.1.0",)),
        (21, "python", "print(1)\n", 0, None),  # prose between the snippet and the text block: not its output
        (28, "shell", "kaisched schedule -f d.yaml", 0, None),
    ]
    assert found[2].inline


def test_classification_and_named_paths() -> None:
    assert classify("kaisched schedule -f examples/cluster.yaml") == ("run", "")
    assert classify("kubectl apply -f examples/install/queues.yaml") == ("check", "")
    assert classify("kubectl get pods")[0] == "not-run"
    assert classify("rm -rf /tmp/x") == ("unknown", "")
    assert named_paths("kaisched schedule -f - -f x.yaml --config examples/config/spread.yaml -o out/") == [
        "x.yaml", "examples/config/spread.yaml"]
    assert named_paths("kaisched simulate --compare a.yaml b.yaml -o cmp") == ["a.yaml", "b.yaml"]
    assert named_paths("helm install kaisched deploy/helm/kaisched --set image.repository=r.example.com/k") == [
        "deploy/helm/kaisched"]


def test_shown_output_is_compared_line_by_line_in_order() -> None:
    actual = "┃ Queue  ┃ Priority ┃\n│ team-a │   100    │\nreport: out/report.html\n"
    assert missing_lines(("| Queue | Priority |",), actual) == ["| Queue | Priority |"]
    assert missing_lines(("Queue Priority", "...", "team-a 100"), actual) == []
    assert missing_lines(("team-a 100", "Queue Priority"), actual) == ["Queue Priority"]


def test_kubectl_apply_schedules_what_the_page_applied(tmp_path: Path, workdir: Path) -> None:
    page = write_page(tmp_path, "```sh\nkubectl apply -f examples/install/queues.yaml\n"
                                "kubectl apply -f examples/cluster.yaml\n```\n")
    clean, broken = page_commands(page)
    assert applied_examples(broken) == ["examples/install/queues.yaml", "examples/cluster.yaml"]
    check_without_running(clean, workdir)
    with pytest.raises(AssertionError, match="exited 1"):  # cluster.yaml's PodGroup in an unknown queue
        check_without_running(broken, workdir)
