"""``kaisched from-kai``: KAI's Helm values and SchedulingShard/Config objects as kaisched's Helm values or scheduler
configuration (docs/migrating-from-kai.md)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

import click
import yaml

from kaisched.cli.schedule import input_limits
from kaisched.framework.config import ConfigError
from kaisched.framework.kai_operator import ShardConfig, mapping_at, shard_config
from kaisched.k8s.loader import MAX_INPUT_BYTES_ENV, InputLimits

EXAMPLES = """\
\b
Examples:
  # kaisched's Helm values from the values KAI was installed with
  kaisched from-kai --values examples/kai/kai-values.yaml
  # the scheduler configuration of KAI's default shard, read from the cluster
  kaisched from-kai --kubeconfig ~/.kube/config -o config
"""

SHARD_KIND: Final = "SchedulingShard"
CONFIG_KIND: Final = "Config"
#: KAI components kaisched has no counterpart of: their values are listed, not mapped
NO_COUNTERPART: Final = {
    "operator": "kaisched has no operator (its chart and ConfigMap configure it)",
    "binder": "kaisched binds itself: no binder, no reservation pods",
    "admission": "kaisched runs no admission webhook",
    "nodescaleadjuster": "kaisched has no node-scale-adjuster",
    "queuecontroller": "kaisched writes the queues' status itself",
    "podgroupcontroller": "kaisched writes the PodGroups' status itself (not status.phase)",
    "podgrouper": "kaisched's pod-grouper runs in the scheduler",
    "prometheus": "kaisched installs no Prometheus (time-based fair share: docs/fairness.md)",
    "crdupgrader": "Helm installs kaisched's CRDs once; apply deploy/crds/ after an upgrade",
    "kaiConfig": "kaisched reads no Config object at run time",
    "kaiConfigDeployer": "kaisched reads no Config object at run time",
    "topologyMigration": "no Kueue Topology migration",
    "postCleanup": "no post-delete hook",
    "numaPlacementExporter": "no NUMA placement exporter",
    "openshift": "no OpenShift SecurityContextConstraints",
}


class FromKaiError(ValueError):
    """Input that cannot be mapped (a sentence naming the file and field)."""


def default_shard(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``default`` SchedulingShard KAI's chart renders from its ``scheduler.*`` values."""
    scheduler = mapping_at(values.get("scheduler"), "scheduler")
    spec: dict[str, Any] = {"partitionLabelValue": ""}
    strategy = scheduler.get("placementStrategy", "binpack")
    if strategy:
        spec["placementStrategy"] = {"gpu": strategy, "cpu": strategy}
    for key in ("args", "plugins", "actions", "scenarioSearchBudgets"):
        if scheduler.get(key):
            spec[key] = dict(mapping_at(scheduler[key], f"scheduler.{key}"))
    return {"apiVersion": "kai.scheduler/v1", "kind": SHARD_KIND, "metadata": {"name": "default"}, "spec": spec}


def helm_values(values: Mapping[str, Any], namespace: str, notes: list[str]) -> dict[str, Any]:
    """kaisched's Helm values (deploy/helm/kaisched/values.yaml) for what KAI's values say (without ``config``)."""
    glob = mapping_at(values.get("global"), "global")
    out: dict[str, Any] = {"namespace": namespace, "createNamespace": False}
    image: dict[str, Any] = {}
    registry = glob.get("registry")
    if registry:
        image["repository"] = f"{str(registry).rstrip('/')}/kaisched"
        notes.append(f"global.registry: kaisched's image is {image['repository']}: push it there (docs/install.md)")
    if glob.get("imagePullPolicy"):
        image["pullPolicy"] = glob["imagePullPolicy"]
    if image:
        out["image"] = image
    if glob.get("tag"):
        notes.append(f"global.tag: {glob['tag']!r} is KAI's version; kaisched's image has its own (image.tag)")
    secrets = glob.get("imagePullSecrets")
    if secrets:
        if not isinstance(secrets, list):
            raise FromKaiError(f"global.imagePullSecrets: expected a list, got {secrets!r}")
        out["imagePullSecrets"] = [s if isinstance(s, Mapping) else {"name": str(s)} for s in secrets]
    for key in ("nodeSelector", "affinity", "tolerations", "priorityClassName"):
        if glob.get(key):
            out[key] = glob[key]
    if "leaderElection" in glob:
        leader = bool(glob["leaderElection"])
        out["leaderElection"] = {"enabled": leader}
        if not leader:
            out["replicas"] = 1  # two replicas need leader election
    mode = glob.get("gpuSharingMode") or ("NonMemoryEnforced" if glob.get("gpuSharing") else
                                         "Disabled" if glob.get("gpuSharing") is False else "")
    if mode == "Disabled":
        notes.append("global.gpuSharing: disabled in KAI (its admission webhook refuses fractional GPU requests); "
                     "kaisched has no webhook and schedules gpu-fraction and gpu-memory pods")
    elif mode and mode != "NonMemoryEnforced":
        notes.append(f"global.gpuSharingMode: {mode!r} is not supported (kaisched shares GPUs as NonMemoryEnforced)")
    if glob.get("nodePoolLabelKey") not in (None, "", "kai.scheduler/node-pool"):
        notes.append(f"global.nodePoolLabelKey: {glob['nodePoolLabelKey']!r}: kaisched has no node pools")
    for key in ("namespaceLabelSelector", "podLabelSelector"):
        if glob.get(key):
            notes.append(f"global.{key}: not supported (kaisched schedules every pod with its scheduler name)")
    queue = mapping_at(values.get("defaultQueue"), "defaultQueue")
    defaults: dict[str, Any] = {}
    if "createDefaultQueue" in queue:
        defaults["queues"] = bool(queue["createDefaultQueue"])
    if queue.get("parentName", "default-parent-queue") != "default-parent-queue" or \
            queue.get("childName", "default-queue") != "default-queue":
        notes.append("defaultQueue.parentName/childName: kaisched's default queues are default-parent-queue and "
                     "default-queue")
    classes = mapping_at(values.get("defaultPriorityClasses"), "defaultPriorityClasses")
    if "enabled" in classes:
        defaults["priorityClasses"] = bool(classes["enabled"])
    if defaults:
        out["defaults"] = defaults
    scheduler = mapping_at(values.get("scheduler"), "scheduler")
    if scheduler.get("enabled") is False:
        notes.append("scheduler.enabled: false; kaisched is the scheduler")
    for key, why in NO_COUNTERPART.items():
        if key in values:
            notes.append(f"{key}: not mapped ({why})")
    return out


def _documents(paths: tuple[str, ...], limits: InputLimits) -> list[Mapping[str, Any]]:
    from kaisched.k8s.loader import InputReadError, read_text_reasoned

    docs: list[Mapping[str, Any]] = []
    for path in paths:
        try:
            text = read_text_reasoned(path, limits, source=path)
            loaded = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
        except InputReadError as exc:
            raise FromKaiError(str(exc)) from None
        except yaml.YAMLError as exc:
            raise FromKaiError(f"{path}: invalid YAML: {exc}") from None
        for doc in loaded:
            if isinstance(doc, Mapping) and doc.get("kind") == "List":
                docs.extend(d for d in doc.get("items") or [] if isinstance(d, Mapping))
            elif isinstance(doc, Mapping):
                docs.append(doc)
    return docs


def _named(docs: list[Mapping[str, Any]], kind: str, name: str) -> Mapping[str, Any] | None:
    for doc in docs:
        meta = doc.get("metadata")
        if doc.get("kind") == kind and isinstance(meta, Mapping) and meta.get("name") == name:
            return doc
    return None


def _live(kubeconfig: str, context: str | None, shard: str,
          limits: InputLimits) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The SchedulingShard and the kai-config Config of a cluster (None: not there)."""
    from kaisched.kube.api import ApiError
    from kaisched.kube.client import KubeClient, KubeConfigError
    from kaisched.kube.kai_objects import read_kai_objects

    try:
        api = KubeClient.from_env(kubeconfig, context, limits=limits)
    except (KubeConfigError, OSError) as exc:
        raise click.UsageError(f"kubeconfig: {exc}") from None
    try:
        return read_kai_objects(api, shard)
    except ApiError as exc:
        click.echo(f"kaisched from-kai: reading KAI's SchedulingShard {shard!r} and Config: {exc}", err=True)
        sys.exit(1)
    finally:
        api.close()


def _implemented_only(mapping: dict[str, Any], notes: list[str]) -> None:
    """Leave out the actions and plugins kaisched does not implement, each listed (KAI would run them)."""
    from kaisched.actions.registry import ACTIONS
    from kaisched.plugins.registry import ACCEPTED_WITHOUT_EFFECT, PLUGINS

    actions = [a.strip() for a in str(mapping.get("actions", "")).split(",") if a.strip()]
    for name in actions:
        if name not in ACTIONS:
            notes.append(f"action {name!r}: not implemented by kaisched; left out")
    mapping["actions"] = ", ".join(a for a in actions if a in ACTIONS)
    for tier in mapping.get("tiers", []):
        kept = []
        for plugin in tier["plugins"]:
            if plugin["name"] in PLUGINS or plugin["name"] in ACCEPTED_WITHOUT_EFFECT:
                kept.append(plugin)
            else:
                notes.append(f"plugin {plugin['name']!r}: not implemented by kaisched; left out")
        tier["plugins"] = kept


@click.command("from-kai", epilog=EXAMPLES)
@click.option("--values", "values_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The Helm values KAI was installed with (helm get values kai-scheduler -n kai-scheduler -a).")
@click.option("-f", "--filename", "paths", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="KAI's SchedulingShard and Config objects (kubectl get schedulingshards,configs -o yaml). "
                   "Repeatable.")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Read the SchedulingShard and the kai-config Config from this cluster (GETs, nothing written).")
@click.option("--context", default=None, help="kubeconfig context (default: the file's current context).")
@click.option("--shard", default="default", show_default=True, help="The SchedulingShard to take.")
@click.option("-n", "--namespace", default="kai-scheduler", show_default=True,
              help="The namespace kaisched is installed in (helm install -n NAMESPACE --create-namespace).")
@click.option("-o", "--output", type=click.Choice(["values", "config"]), default="values", show_default=True,
              help="values: kaisched's Helm values (the configuration under config:); config: the scheduler "
                   "configuration alone (kaisched run --config).")
@click.option("--max-input-bytes", default=None, metavar="BYTES",
              help=f"Read at most this much of each file (default 1Gi, or ${MAX_INPUT_BYTES_ENV}).")
def from_kai_command(values_path: str | None, paths: tuple[str, ...], kubeconfig: str | None, context: str | None,
                     shard: str, namespace: str, output: str, max_input_bytes: str | None) -> None:
    """Map KAI's installation to kaisched's: the Helm values KAI was installed with (global.registry,
    global.imagePullSecrets, global.leaderElection, scheduler.placementStrategy/args/plugins/actions,
    global.gpuSharing, the default queues and priority classes, ...) and the scheduler configuration KAI's operator
    renders from the SchedulingShard (placement strategy, plugins, actions, kValue, minRuntime,
    queueDepthPerAction, args) and the kai-config Config. The shard comes from -f files, else from --kubeconfig,
    else from the values' scheduler.* (as KAI's chart renders its default shard), else KAI's defaults. What has no
    counterpart in kaisched is listed on standard error.

    Exit status: 0 on success; 1 when the cluster cannot be read; 2 when an input cannot be used (the message
    names the file and field)."""
    limits = input_limits(max_input_bytes)
    notes: list[str] = []
    try:
        values: Mapping[str, Any] = {}
        if values_path is not None:
            values = mapping_at(next(iter(_documents((values_path,), limits)), {}), values_path)
        shard_obj: Mapping[str, Any] | None = None
        config_obj: Mapping[str, Any] | None = None
        if paths:
            docs = _documents(paths, limits)
            shard_obj, config_obj = _named(docs, SHARD_KIND, shard), _named(docs, CONFIG_KIND, "kai-config")
            if shard_obj is None:
                raise FromKaiError(f"{', '.join(paths)}: no SchedulingShard named {shard!r}")
        elif kubeconfig is not None:
            shard_obj, config_obj = _live(kubeconfig, context, shard, limits)
            if shard_obj is None:
                notes.append(f"the cluster has no SchedulingShard {shard!r}: KAI's default configuration")
        if shard_obj is None:
            shard_obj = default_shard(values)
        rendered: ShardConfig = shard_config(shard_obj, config_obj)
        notes.extend(rendered.notes)
        _implemented_only(rendered.mapping, notes)
        chart = helm_values(values, namespace, notes) if output == "values" else {}
    except (FromKaiError, ConfigError) as exc:
        click.echo(f"kaisched from-kai: {exc}", err=True)
        sys.exit(2)
    for note in notes:
        click.echo(f"kaisched from-kai: {note}", err=True)
    data = rendered.mapping if output == "config" else {**chart, "config": rendered.mapping}
    click.echo(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, width=120), nl=False)
