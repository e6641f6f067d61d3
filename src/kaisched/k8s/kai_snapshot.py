"""KAI's snapshot ZIP (``GET /get-snapshot``, spec 11.3; ../shared/spec/kai-snapshot.md): read and write it.

The ZIP holds ``snapshot.json``: ``config`` (KAI's SchedulerConfiguration), ``schedulerParams`` (Go field
names, ``omitempty``: an absent field is Go's zero value, durations are integer nanoseconds),
``rawObjects`` (17 lists of Kubernetes objects, the list's key decides the type) and ``discovery``.

This module is the pure part: bytes to a checked :class:`KaiSnapshot` (every type checked, a
:class:`SnapshotError` naming the field otherwise), the snapshot's objects filtered as KAI's snapshot-tool sees
them (:func:`to_objects`), and a snapshot written in KAI's format (:func:`write_snapshot`). Which actions and
plugins kaisched runs is decided a layer up (:mod:`kaisched.cluster.replay`). What a replay cannot use is listed
in :attr:`KaiSnapshot.warnings`, never silently dropped.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import msgspec

from kaisched.k8s import constants as C
from kaisched.k8s.objects import ParsedObjects
from kaisched.k8s.parse import parse_objects

SNAPSHOT_FILE: Final = "snapshot.json"
#: decompressed size above which a snapshot is refused (a ZIP bomb, or a file that is not one)
MAX_SNAPSHOT_BYTES: Final = 4 << 30
#: kaisched's own top-level key in the snapshots it writes (KAI's decoder ignores unknown keys): the capture time
#: and the parameters KAI has no field for
KAISCHED_KEY: Final = "kaisched"

#: rawObjects key -> (kind, apiVersion) that kaisched parses, in KAI v0.17's order; None: read by KAI, not by kaisched
RAW_KINDS: Final[Mapping[str, tuple[str, str] | None]] = {
    "pods": (C.POD_KIND, C.CORE_API_VERSION),
    "nodes": (C.NODE_KIND, C.CORE_API_VERSION),
    "queues": (C.QUEUE_KIND, C.QUEUE_API_VERSION),
    "podGroups": (C.POD_GROUP_KIND, C.POD_GROUP_API_VERSION),
    "bindRequests": None,
    "priorityClasses": (C.PRIORITY_CLASS_KIND, C.PRIORITY_CLASS_API_VERSION),
    "configMaps": None,
    "persistentVolumes": None,
    "persistentVolumeClaims": None,
    "csiStorageCapacities": None,
    "storageClasses": None,
    "csiDrivers": None,
    "resourceClaims": (C.RESOURCE_CLAIM_KIND, C.RESOURCE_V1_API_VERSION),
    "resourceSlices": (C.RESOURCE_SLICE_KIND, C.RESOURCE_V1_API_VERSION),
    "deviceClasses": (C.DEVICE_CLASS_KIND, C.RESOURCE_V1_API_VERSION),
    "topologies": (C.TOPOLOGY_KIND, C.TOPOLOGY_API_VERSION),
    "nodeResourceTopologies": None,
}
#: the rawObjects keys only KAI v0.17 writes
V017_ONLY_KEYS: Final = ("persistentVolumes", "nodeResourceTopologies")
_IGNORED_WHY: Final = {
    "configMaps": "KAI reads them for volume and env checks only; kaisched does not check those",
    "persistentVolumes": "kaisched does not schedule CSI storage",
    "persistentVolumeClaims": "kaisched does not schedule CSI storage",
    "csiStorageCapacities": "kaisched does not schedule CSI storage",
    "storageClasses": "kaisched does not schedule CSI storage",
    "csiDrivers": "kaisched does not schedule CSI storage",
    "nodeResourceTopologies": "kaisched does not read NodeResourceTopologies",
}
PLUGIN_SWITCHES: Final = ("disableJobOrder", "disableTaskOrder", "disablePreemptable", "disableReclaimable",
                          "disableQueueOrder", "disablePredicate", "disableNodeOrder")
#: KAI's schedulerParams, in Go struct order
SCHEDULER_PARAMS: Final = (
    "schedulerName", "restrictSchedulingNodes", "partitionParams", "maxNumberConsolidationPreemptees",
    "scheduleCSIStorage", "useSchedulingSignatures", "fullHierarchyFairness", "allowConsolidatingReclaim",
    "numOfStatusRecordingWorkers", "globalDefaultStalenessGracePeriod", "schedulePeriod",
    "stuckInReleasingThreshold", "detailedFitErrors", "updatePodEvictionCondition", "queueLabelKey")
CONFIG_FIELDS: Final = ("actions", "tiers", "queueDepthPerAction", "usageDBConfig", "scenarioSearchBudgets")
NODE_POOL_KEY_FIELD: Final = "NodePoolLabelKey"
NODE_POOL_VALUE_FIELD: Final = "NodePoolLabelValue"


class SnapshotError(ValueError):
    """A snapshot that cannot be read: the message names the file or the field."""


@dataclass(frozen=True, slots=True)
class PluginEntry:
    """One plugin of a tier as the snapshot names it (arguments: KAI's map[string]string)."""

    name: str
    arguments: Mapping[str, str]
    where: str  # config.tiers[i].plugins[j]


@dataclass(slots=True)
class KaiSnapshot:
    """One snapshot, read and type-checked. ``params`` are kaisched's scheduler params by flag name (KAI's
    ``schedulerParams`` translated); ``config`` holds ``queueDepthPerAction``, ``usageDBConfig`` and
    ``scenarioSearchBudgets`` as the snapshot has them."""

    actions: list[str]
    tiers: list[list[PluginEntry]]
    config: dict[str, Any]
    params: dict[str, Any]
    raw_objects: dict[str, list[dict[str, Any]]]
    partition_key: str = C.NODE_POOL_LABEL
    partition_value: str = ""
    server_version: str = ""
    kai_version: str = "v0.13"  # the shape: v0.17 when any of its fields is present
    captured_at: datetime | None = None  # kaisched's snapshots only
    warnings: list[str] = field(default_factory=list)
    source: str = ""

    def counts(self) -> dict[str, int]:
        """Objects per rawObjects key (non-empty lists only)."""
        return {k: len(v) for k, v in self.raw_objects.items() if v}

    def partition(self) -> str:
        """The node-pool selector as a phrase."""
        if not self.partition_key:
            return "every node, queue and PodGroup"
        if self.partition_value:
            return f"{self.partition_key}={self.partition_value}"
        return f"objects without the {self.partition_key} label"


# ------------------------------------------------------------------------------------------- ZIP + JSON


def read_snapshot(path: str | Path, max_bytes: int = MAX_SNAPSHOT_BYTES) -> KaiSnapshot:
    """Read and check the snapshot ZIP at ``path`` (at most ``max_bytes`` of it, and of its JSON)."""
    p = Path(path)
    try:
        if p.is_dir():
            raise SnapshotError(f"{path}: is a directory, not a snapshot ZIP")
        size = p.stat().st_size
        if size > max_bytes:
            raise SnapshotError(f"{path}: {size:,} bytes, over the {max_bytes:,} byte limit")
        data = p.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return load_snapshot(data, source=str(path), max_bytes=max_bytes)


def load_snapshot(data: bytes, *, source: str = "snapshot", max_bytes: int = MAX_SNAPSHOT_BYTES) -> KaiSnapshot:
    """The snapshot of a ZIP's bytes."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        raise SnapshotError(f"{source}: not a ZIP archive (corrupt or truncated); KAI's /get-snapshot serves a "
                            f"ZIP holding {SNAPSHOT_FILE}") from None
    with archive:
        names = archive.namelist()
        if SNAPSHOT_FILE not in names:
            has = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") if names else "no files"
            raise SnapshotError(f"{source}: the ZIP has no {SNAPSHOT_FILE} (it holds {has})")
        info = archive.getinfo(SNAPSHOT_FILE)
        if info.file_size > max_bytes:
            raise SnapshotError(f"{source}: {SNAPSHOT_FILE} is {info.file_size:,} bytes, over the "
                                f"{max_bytes:,} byte limit")
        try:
            with archive.open(info) as stream:
                text = stream.read(max_bytes + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
            raise SnapshotError(f"{source}: {SNAPSHOT_FILE} cannot be decompressed (corrupt or truncated ZIP): "
                                f"{exc}") from None
        if len(text) > max_bytes:
            raise SnapshotError(f"{source}: {SNAPSHOT_FILE} is over the {max_bytes:,} byte limit")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{source}: {SNAPSHOT_FILE} is not UTF-8 text (byte {exc.start})") from None
    try:
        doc = msgspec.json.decode(text)  # one JSON value (v0.17's json.Encoder adds a newline: white space)
    except msgspec.DecodeError:
        doc = _first_value(decoded, source)  # anything after the value, or an error message with its line
    return from_document(doc, source=source)


def _first_value(decoded: str, source: str) -> object:
    """The first JSON value of ``decoded``, as Go's json.Decoder reads it, or an error naming its line."""
    try:
        doc, _ = json.JSONDecoder().raw_decode(decoded.lstrip())
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{source}: {SNAPSHOT_FILE}: invalid JSON at line {exc.lineno} column {exc.colno}: "
                            f"{exc.msg}") from None
    except RecursionError:
        raise SnapshotError(f"{source}: {SNAPSHOT_FILE}: JSON nested too deeply") from None
    return doc


# ------------------------------------------------------------------------------------------- the document


def describe(value: object) -> str:
    """A JSON value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"


def mapping_at(value: object, where: str, error: type[ValueError] = SnapshotError) -> Mapping[str, Any]:
    """``value`` when it is a JSON object or mapping ({} for null), else ``error`` naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected an object, got {describe(value)}")
    return value



def from_document(doc: object, *, source: str = "snapshot") -> KaiSnapshot:
    """The snapshot of a decoded ``snapshot.json``."""
    if not isinstance(doc, Mapping):
        raise SnapshotError(f"{source}: {SNAPSHOT_FILE}: expected a JSON object with config, schedulerParams, "
                            f"rawObjects, got {describe(doc)}")
    warnings: list[str] = []
    for key in doc:
        if key not in ("config", "schedulerParams", "rawObjects", "discovery", KAISCHED_KEY):
            warnings.append(f"{key}: unknown top-level field, ignored")
    if doc.get("schedulerParams") is None:
        raise SnapshotError("schedulerParams: missing; KAI's snapshot always has it (partitionParams inside it "
                            "is required: KAI's snapshot-tool crashes without it)")
    if doc.get("rawObjects") is None:
        raise SnapshotError("rawObjects: missing; a snapshot without objects has nothing to replay")
    params_raw = mapping_at(doc["schedulerParams"], "schedulerParams")
    params, key, value = _params(params_raw, warnings)
    captured: datetime | None = None
    own = mapping_at(doc.get(KAISCHED_KEY), KAISCHED_KEY)
    extra = mapping_at(own.get("params"), f"{KAISCHED_KEY}.params")
    params.update({str(k): v for k, v in extra.items()})
    if own.get("capturedAt") is not None:
        captured = _rfc3339(own["capturedAt"], f"{KAISCHED_KEY}.capturedAt")
    config_raw = mapping_at(doc.get("config"), "config")
    actions, tiers, config = _config(config_raw, warnings)
    raw = _raw_objects(mapping_at(doc["rawObjects"], "rawObjects"), warnings)
    server_version = _server_version(mapping_at(doc.get("discovery"), "discovery"))
    v017 = ("scenarioSearchBudgets" in config_raw or "stuckInReleasingThreshold" in params_raw
            or any(k in mapping_at(doc["rawObjects"], "rawObjects") for k in V017_ONLY_KEYS))
    return KaiSnapshot(actions=actions, tiers=tiers, config=config, params=params, raw_objects=raw,
                       partition_key=key, partition_value=value, server_version=server_version,
                       kai_version="v0.17" if v017 else "v0.13", captured_at=captured, warnings=warnings,
                       source=source)


def _rfc3339(value: object, where: str) -> datetime:
    if not isinstance(value, str):
        raise SnapshotError(f"{where}: expected an RFC 3339 time (a string), got {describe(value)}")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SnapshotError(f"{where}: expected an RFC 3339 time like 2026-01-01T00:00:00Z, got {value!r}") from None
    if ts.tzinfo is None:
        raise SnapshotError(f"{where}: the time has no zone (RFC 3339 needs Z or an offset): {value!r}")
    return ts


def _server_version(discovery: Mapping[str, Any]) -> str:
    server = mapping_at(discovery.get("serverVersion"), "discovery.serverVersion")
    git, major, minor = server.get("gitVersion"), server.get("major"), server.get("minor")
    if isinstance(git, str) and git:
        return git
    if isinstance(major, str) and isinstance(minor, str) and major:
        return f"v{major}.{minor}"
    return ""


def _bool(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise SnapshotError(f"schedulerParams.{key}: expected a boolean, got {describe(value)}")
    return value


def _int(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"schedulerParams.{key}: expected an integer, got {describe(value)}")
    return value


def _nanoseconds(raw: Mapping[str, Any], key: str) -> timedelta:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"schedulerParams.{key}: expected integer nanoseconds (a Go time.Duration, "
                            f"60000000000 for 60s), got {describe(value)}")
    if value < 0:
        raise SnapshotError(f"schedulerParams.{key}: must be >= 0 nanoseconds, got {value}")
    return timedelta(microseconds=value // 1000)


def _str(raw: Mapping[str, Any], key: str, where: str = "schedulerParams") -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise SnapshotError(f"{where}.{key}: expected a string, got {describe(value)}")
    return value


def _params(raw: Mapping[str, Any], warnings: list[str]) -> tuple[dict[str, Any], str, str]:
    """kaisched's params (by flag name) of KAI's ``schedulerParams``, and the partition's label key and value.
    ``omitempty``: an absent field is Go's zero value (false, 0, ""), which is what KAI ran with."""
    for key in raw:
        if key not in SCHEDULER_PARAMS:
            warnings.append(f"schedulerParams.{key}: unknown parameter, ignored")
    name = _str(raw, "schedulerName")
    if not name:
        warnings.append(f"schedulerParams.schedulerName: empty; {C.SCHEDULER_NAME} is used")
        name = C.SCHEDULER_NAME
    params: dict[str, Any] = {
        "scheduler-name": name,
        "restrict-node-scheduling": _bool(raw, "restrictSchedulingNodes"),
        "max-consolidation-preemptees": _int(raw, "maxNumberConsolidationPreemptees"),
        "use-scheduling-signatures": _bool(raw, "useSchedulingSignatures"),
        "full-hierarchy-fairness": _bool(raw, "fullHierarchyFairness"),
        "allow-consolidating-reclaim": _bool(raw, "allowConsolidatingReclaim"),
        "default-staleness-grace-period": _nanoseconds(raw, "globalDefaultStalenessGracePeriod"),
        "detailed-fit-errors": _bool(raw, "detailedFitErrors"),
        "update-pod-eviction-condition": _bool(raw, "updatePodEvictionCondition"),
    }
    _int(raw, "numOfStatusRecordingWorkers")  # no effect on one replayed cycle, but checked
    _nanoseconds(raw, "schedulePeriod")
    if _bool(raw, "scheduleCSIStorage"):
        warnings.append("schedulerParams.scheduleCSIStorage: true, but kaisched does not schedule CSI storage "
                        "(volumes are not checked)")
    if _nanoseconds(raw, "stuckInReleasingThreshold"):
        warnings.append("schedulerParams.stuckInReleasingThreshold: not implemented by kaisched, ignored")
    queue_key = _str(raw, "queueLabelKey")
    if queue_key and queue_key != C.QUEUE_LABEL:
        warnings.append(f"schedulerParams.queueLabelKey: {queue_key!r} has no effect on a replay (there is no "
                        "pod-grouper; PodGroups name their queues)")
    if raw.get("partitionParams") is None:
        warnings.append("schedulerParams.partitionParams: missing (KAI's snapshot-tool crashes without it); every "
                        "node, queue and PodGroup is taken")
        return params, "", ""
    partition = mapping_at(raw["partitionParams"], "schedulerParams.partitionParams")
    # the Go struct has no JSON tags: encoding/json matches its field names case-insensitively
    folded = {str(k).lower(): (str(k), v) for k, v in partition.items()}
    values: list[str] = []
    for wanted in (NODE_POOL_KEY_FIELD, NODE_POOL_VALUE_FIELD):
        original, value = folded.get(wanted.lower(), (wanted, ""))
        if not isinstance(value, str):
            raise SnapshotError(f"schedulerParams.partitionParams.{original}: expected a string, got "
                                f"{describe(value)}")
        values.append(value)
    for k in partition:
        if str(k).lower() not in (NODE_POOL_KEY_FIELD.lower(), NODE_POOL_VALUE_FIELD.lower()):
            warnings.append(f"schedulerParams.partitionParams.{k}: unknown field, ignored")
    return params, values[0], values[1]


def _config(raw: Mapping[str, Any], warnings: list[str]) -> tuple[list[str], list[list[PluginEntry]], dict[str, Any]]:
    for key in raw:
        if key not in CONFIG_FIELDS:
            warnings.append(f"config.{key}: unknown configuration field, ignored")
    actions_raw = raw.get("actions", "")
    if actions_raw is None:
        actions_raw = ""
    if not isinstance(actions_raw, str):
        raise SnapshotError(f"config.actions: expected a comma separated string, got {describe(actions_raw)}")
    actions = [a.strip() for a in actions_raw.split(",") if a.strip()]
    tiers = _tiers(raw.get("tiers"), warnings)
    config: dict[str, Any] = {}
    depth = raw.get("queueDepthPerAction")
    if depth is not None:
        depth_map = mapping_at(depth, "config.queueDepthPerAction")
        for k, v in depth_map.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise SnapshotError(f"config.queueDepthPerAction.{k}: expected an integer, got {describe(v)}")
        config["queueDepthPerAction"] = dict(depth_map)
    for key in ("usageDBConfig", "scenarioSearchBudgets"):
        if raw.get(key) is not None:
            config[key] = dict(mapping_at(raw[key], f"config.{key}"))
    return actions, tiers, config


def _tiers(value: object, warnings: list[str]) -> list[list[PluginEntry]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SnapshotError(f"config.tiers: expected a list of {{plugins: [...]}}, got {describe(value)}")
    tiers: list[list[PluginEntry]] = []
    for i, tier in enumerate(value):
        where = f"config.tiers[{i}]"
        plugins_raw = mapping_at(tier, where).get("plugins")
        if plugins_raw is None:
            plugins_raw = []
        if not isinstance(plugins_raw, list):
            raise SnapshotError(f"{where}.plugins: expected a list, got {describe(plugins_raw)}")
        plugins: list[PluginEntry] = []
        for j, p in enumerate(plugins_raw):
            pw = f"{where}.plugins[{j}]"
            pm = mapping_at(p, pw)
            name = pm.get("name")
            if not isinstance(name, str) or not name:
                raise SnapshotError(f"{pw}.name: expected a plugin name (a string), got {describe(name)}")
            args = mapping_at(pm.get("arguments"), f"{pw}.arguments")
            for k, v in args.items():
                if not isinstance(v, str):
                    raise SnapshotError(f"{pw}.arguments.{k}: expected a string (KAI's arguments are "
                                        f"map[string]string), got {describe(v)}")
            for switch in PLUGIN_SWITCHES:
                flag = pm.get(switch, False)
                if flag is None:
                    continue
                if not isinstance(flag, bool):
                    raise SnapshotError(f"{pw}.{switch}: expected a boolean, got {describe(flag)}")
                if flag:
                    warnings.append(f"{pw}.{switch}: plugin {name}'s switch is not implemented by kaisched, ignored")
            plugins.append(PluginEntry(name, {str(k): v for k, v in args.items()}, pw))
        tiers.append(plugins)
    return tiers


def _raw_objects(raw: Mapping[str, Any], warnings: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for key in raw:
        if key not in RAW_KINDS:
            warnings.append(f"rawObjects.{key}: unknown object list, ignored")
    for key in RAW_KINDS:
        value = raw.get(key)
        if value is None:  # KAI writes null for an empty lister result
            out[key] = []
            continue
        if not isinstance(value, list):
            raise SnapshotError(f"rawObjects.{key}: expected a list of objects, got {describe(value)}")
        items: list[dict[str, Any]] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise SnapshotError(f"rawObjects.{key}[{i}]: expected an object, got {describe(item)}")
            meta = item.get("metadata")
            if meta is not None and not isinstance(meta, dict):
                raise SnapshotError(f"rawObjects.{key}[{i}].metadata: expected an object, got {describe(meta)}")
            for part in ("spec", "status"):
                if item.get(part) is not None and not isinstance(item[part], dict):
                    raise SnapshotError(f"rawObjects.{key}[{i}].{part}: expected an object, got "
                                        f"{describe(item[part])}")
            items.append(item)
        out[key] = items
        why = _IGNORED_WHY.get(key)
        if why and items:
            warnings.append(f"rawObjects.{key}: {len(items)} not used ({why})")
    return out


# ------------------------------------------------------------------------------------------- to objects


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _sub(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def in_partition(obj: Mapping[str, Any], key: str, value: str) -> bool:
    """KAI's node-pool selector: ``key=value``, or ``key`` absent when the value is empty."""
    if not key:
        return True
    labels = _sub(_meta(obj), "labels")
    return labels.get(key) == value if value else key not in labels


def other_scheduler(name: str) -> str:
    """The ``schedulerName`` a replay gives pods that KAI counts on their node only (out of every job)."""
    return f"{name} (not in a job)"


def to_objects(snap: KaiSnapshot, scheduler_name: str) -> ParsedObjects:
    """The snapshot's objects as kaisched parses them, filtered as KAI's snapshot-tool sees them.

    * The node-pool partition selects nodes, queues and PodGroups.
    * A pod reaches its PodGroup only through ``pod-group-name`` (no pod-grouper runs): a pending pod of the
      scheduler without it is never scheduled (left out); an active one counts on its node only.
    * A pod of a PodGroup outside the partition counts on its node only, when its node is in the partition.
    * A pending pod with a BindRequest holds the BindRequest's node (KAI's ``Binding``).
    * A pod without ``status.phase`` is ``Unknown``.

    What differs from the objects given is added to ``snap.warnings``."""
    raw = snap.raw_objects
    key, value = snap.partition_key, snap.partition_value
    warnings = snap.warnings
    docs: list[dict[str, Any]] = []

    def add(list_key: str, obj: dict[str, Any]) -> None:
        kind = RAW_KINDS[list_key]
        assert kind is not None
        version = kind[1]
        if version == C.RESOURCE_V1_API_VERSION and obj.get("apiVersion") in C.RESOURCE_API_VERSIONS:
            version = str(obj["apiVersion"])  # a DRA object written with the version its server served
        obj["kind"], obj["apiVersion"] = kind[0], version  # the snapshot's own dicts: the key decides the type
        docs.append(obj)

    nodes = [n for n in raw["nodes"] if in_partition(n, key, value)]
    queues = [q for q in raw["queues"] if in_partition(q, key, value)]
    groups = [g for g in raw["podGroups"] if in_partition(g, key, value)]
    left_out = {k: len(raw[k]) - len(kept) for k, kept in (("nodes", nodes), ("queues", queues),
                                                            ("podGroups", groups))}
    if any(left_out.values()):
        text = ", ".join(f"{n} {k}" for k, n in left_out.items() if n)
        warnings.append(f"partition {snap.partition()}: {text} outside it left out")
    by_name: dict[str, list[str]] = {}
    for g in raw["podGroups"]:
        by_name.setdefault(str(_meta(g).get("name", "")), []).append(str(_meta(g).get("namespace") or ""))
    repeated = sorted(n for n, spaces in by_name.items() if len(spaces) > 1)
    if repeated:
        warnings.append(f"podGroups: {', '.join(repeated[:5])} named in several namespaces; KAI keys PodGroups by "
                        "name alone and merges them, kaisched keeps each")
    node_names = {str(_meta(n).get("name", "")) for n in nodes}

    def group_key(g: Mapping[str, Any]) -> tuple[str, str]:
        return str(_meta(g).get("namespace") or C.DEFAULT_NAMESPACE), str(_meta(g).get("name", ""))

    all_groups = {group_key(g) for g in raw["podGroups"]}
    kept_groups = {group_key(g) for g in groups}
    binding = _bindings(raw["bindRequests"])
    counts = {"ungrouped": 0, "ungrouped-active": 0, "other-pool": 0, "binding": 0, "no-phase": 0, "no-uid": 0,
              "repeated-uid": 0}
    seen_uids: set[str] = set()
    for pod in raw["pods"]:
        meta = dict(_meta(pod))
        spec, status = dict(_sub(pod, "spec")), dict(_sub(pod, "status"))
        ns = str(meta.get("namespace") or C.DEFAULT_NAMESPACE)
        uid = meta.get("uid")
        if not uid:
            counts["no-uid"] += 1
        elif str(uid) in seen_uids:
            counts["repeated-uid"] += 1
        else:
            seen_uids.add(str(uid))
        node = spec.get("nodeName") or ""
        phase = status.get("phase")
        reservation = ns in (C.RESERVATION_NAMESPACE, C.LEGACY_RESERVATION_NAMESPACE) or (
            _sub(meta, "labels").get("app") == C.RESERVATION_APP_LABEL_VALUE)
        ours = spec.get("schedulerName") == scheduler_name and not reservation  # the binder's pods: in no job
        group = _sub(meta, "annotations").get(C.POD_GROUP_NAME_ANNOTATION)
        meta.pop("ownerReferences", None)  # no workload controllers in a snapshot: nothing to group by
        if not phase:
            counts["no-phase"] += 1
            status["phase"] = "Unknown"  # KAI's status of a pod without a phase
        request = binding.get((ns, str(meta.get("name", ""))))
        if request is not None and not node and phase in (None, "", "Pending"):
            node, gpu_groups = request
            spec["nodeName"] = node
            if gpu_groups:
                labels = dict(_sub(meta, "labels"))
                labels.setdefault(C.GPU_GROUP_LABEL, gpu_groups[0])
                meta["labels"] = labels
            counts["binding"] += 1
        if ours and not group:
            if not node:
                counts["ungrouped"] += 1
                continue  # KAI's tool has no pod-grouper: it never schedules this pod
            counts["ungrouped-active"] += 1
            spec["schedulerName"] = other_scheduler(scheduler_name)  # counted on its node only
        elif ours and isinstance(group, str) and (ns, group) in all_groups and (ns, group) not in kept_groups:
            if not node or node not in node_names:
                counts["other-pool"] += 1
                continue
            spec["schedulerName"] = other_scheduler(scheduler_name)
        add("pods", {**pod, "metadata": meta, "spec": spec, "status": status})
    notes = {
        "ungrouped": f"pending pods of {scheduler_name} have no {C.POD_GROUP_NAME_ANNOTATION} annotation; KAI's "
                     "snapshot-tool has no pod-grouper, so they are not scheduled (left out)",
        "ungrouped-active": f"bound or running pods of {scheduler_name} have no {C.POD_GROUP_NAME_ANNOTATION} "
                            "annotation: counted on their nodes, in no job",
        "other-pool": "pods of PodGroups outside the partition, not on its nodes, left out",
        "binding": "pending pods with a BindRequest are taken as binding to the BindRequest's selected node",
        "no-phase": "pods without status.phase are Unknown, as in KAI",
        "no-uid": "pods without metadata.uid (KAI keys pods by uid and merges them; kaisched keeps each)",
        "repeated-uid": "pods with a uid another pod has (KAI keys pods by uid and merges them; kaisched keeps each)",
    }
    for what, n in counts.items():
        if n:
            warnings.append(f"pods: {n} {notes[what]}")
    for obj in nodes:
        add("nodes", obj)
    for obj in queues:
        add("queues", obj)
    for obj in groups:
        add("podGroups", obj)
    for list_key in ("priorityClasses", "topologies", "deviceClasses", "resourceSlices", "resourceClaims"):
        for obj in raw[list_key]:
            add(list_key, obj)
    return parse_objects(docs)


def _bindings(requests: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, list[str]]]:
    """(namespace, pod name) -> (selected node, selected GPU groups) of each BindRequest."""
    out: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for br in requests:
        spec = _sub(br, "spec")
        pod, node = spec.get("podName"), spec.get("selectedNode")
        if isinstance(pod, str) and isinstance(node, str) and pod and node:
            groups = spec.get("selectedGPUGroups")
            gpu_groups = [str(g) for g in groups] if isinstance(groups, list) else []
            out[(str(_meta(br).get("namespace") or C.DEFAULT_NAMESPACE), pod)] = (node, gpu_groups)
    return out


# ------------------------------------------------------------------------------------------- writing


def nanoseconds(value: timedelta) -> int:
    """A duration as Go's ``time.Duration`` marshals it: integer nanoseconds."""
    return (value // timedelta(microseconds=1)) * 1000


def partition_params(key: str = C.NODE_POOL_LABEL, value: str = "") -> dict[str, str]:
    """KAI's ``partitionParams`` (Go field names: the struct has no JSON tags)."""
    return {NODE_POOL_KEY_FIELD: key, NODE_POOL_VALUE_FIELD: value}


def write_snapshot(config: Mapping[str, Any], scheduler_params: Mapping[str, Any],
                   raw_objects: Mapping[str, Sequence[Mapping[str, Any]]], *,
                   discovery: Mapping[str, Any] | None = None, kaisched: Mapping[str, Any] | None = None) -> bytes:
    """A snapshot ZIP in KAI v0.17's shape: one deflated ``snapshot.json``, compact JSON followed by a newline (as
    Go's ``json.Encoder`` writes it), all 17 ``rawObjects`` keys (``null`` for an empty list, as KAI's plugin
    writes an empty lister result). ``config`` and ``scheduler_params`` are KAI's documents; ``kaisched``: this
    project's own top-level key (KAI's decoder ignores it)."""
    for key in raw_objects:
        if key not in RAW_KINDS:
            raise ValueError(f"rawObjects.{key}: not one of KAI's object lists ({', '.join(RAW_KINDS)})")
    doc: dict[str, Any] = {
        "config": dict(config),
        "schedulerParams": dict(scheduler_params),
        "rawObjects": {k: (list(raw_objects[k]) or None) if k in raw_objects else None for k in RAW_KINDS},
    }
    if discovery:
        doc["discovery"] = dict(discovery)
    if kaisched:
        doc[KAISCHED_KEY] = dict(kaisched)
    body = (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(SNAPSHOT_FILE, body)
    return out.getvalue()
