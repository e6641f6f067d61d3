"""kaisched's chart installed as KAI's is (docs/migrating-from-kai.md): ``helm install -n kai-scheduler
--create-namespace`` works as with KAI's chart, and the values ``kaisched from-kai`` makes of KAI's values render
(image, pull secrets, placement, the scheduler configuration KAI's operator would render). Needs helm
(``scripts/helm.sh``), like the chart tests of test_deploy.py."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from kaisched.cli import cli
from kaisched.cluster.schedule import resolve_config
from kaisched.framework.config import SchedulerConfig
from tests.unit.test_deploy import find, helm, helm_template, one  # noqa: F401  (helm: the fixture)

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kai-scheduler"


def test_the_release_namespace_is_not_created_twice(helm: str) -> None:  # noqa: F811
    """``helm install -n kai-scheduler --create-namespace``: Helm makes the namespace, the chart does not."""
    docs = helm_template(helm, "-n", NAMESPACE)
    assert not find(docs, "Namespace")
    assert all(d["metadata"].get("namespace") in (None, NAMESPACE) for d in docs)
    # installed from another namespace, the chart still makes kai-scheduler (the plain manifests' case)
    assert one(helm_template(helm, "-n", "default"), "Namespace")["metadata"]["name"] == NAMESPACE


def test_values_made_from_kais_render(helm: str, tmp_path: Path) -> None:  # noqa: F811
    made = CliRunner().invoke(cli, ["from-kai", "--values", str(ROOT / "examples" / "kai" / "kai-values.yaml")])
    assert made.exit_code == 0, made.output
    values = tmp_path / "kaisched-values.yaml"
    values.write_text(made.stdout)
    docs = helm_template(helm, "-n", NAMESPACE, "--create-namespace", "--values", str(values))
    assert not find(docs, "Namespace") and not find(docs, "Queue")  # defaultQueue.createDefaultQueue: false
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"].startswith("registry.example.com/kai-scheduler/kaisched:")
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    config_map = one(docs, "ConfigMap")
    config = resolve_config(SchedulerConfig.from_mapping(yaml.safe_load(config_map["data"]["config.yaml"])))
    assert config.actions == ("allocate", "reclaim", "preempt")
    assert config.plugin("nodeplacement").arguments == {"gpu": "spread", "cpu": "spread"}  # type: ignore[union-attr]
    assert config.plugin("gpuspread") is not None and config.plugin("gpupack") is None
    assert config.params.detailed_fit_errors
