"""A usage table from a file: ``kaisched schedule --usage FILE`` reproduces one cycle's time-based division.

The file (YAML or JSON) names each queue's normalised usage per resource, as a fraction of the cluster's capacity
over the window (what ``kaisched get queues -o yaml`` shows as ``usage`` and the Prometheus source computes)::

    queues:
      team-a: {gpu: 0.24}                 # cpu and memory default to 0
      team-b: {gpu: 0.5, cpu: 0.1, memory: 0.05}

``nvidia.com/gpu`` is taken for ``gpu``. A queue the file leaves out used nothing. Every value must be a number
>= 0; anything else is a :class:`UsageFileError` naming the queue and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import yaml

from kaisched.k8s.loader import InputReadError, read_text_reasoned
from kaisched.model.usage import UsageTable, UsageVector

__all__ = ["UsageFileError", "load_usage", "parse_usage"]

RESOURCES = {"gpu": 0, "nvidia.com/gpu": 0, "cpu": 1, "memory": 2}


class UsageFileError(ValueError):
    """A usage file that cannot be read or does not hold a usage table (the sentence names the file and field)."""


def parse_usage(raw: object, source: str) -> UsageTable:
    """The table of a decoded file (``source`` names it in errors and in the table)."""
    if not isinstance(raw, Mapping) or set(raw) - {"queues"} or not isinstance(raw.get("queues", {}), Mapping):
        raise UsageFileError(f"{source}: expected a mapping 'queues: {{<queue>: {{gpu: <usage>, cpu: ..., "
                             "memory: ...}}}}'")
    queues: dict[str, UsageVector] = {}
    for name, resources in (raw.get("queues") or {}).items():
        where = f"{source}: queues.{name}"
        if not isinstance(resources, Mapping):
            raise UsageFileError(f"{where}: expected a mapping of resource to usage (gpu, cpu, memory)")
        vector = [0.0, 0.0, 0.0]
        for resource, value in resources.items():
            index = RESOURCES.get(str(resource))
            if index is None:
                raise UsageFileError(f"{where}.{resource}: unknown resource (known: gpu, cpu, memory)")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise UsageFileError(f"{where}.{resource}: expected a number >= 0 (a fraction of the cluster's "
                                     f"capacity over the window), got {value!r}")
            vector[index] = float(value)
        queues[str(name)] = (vector[0], vector[1], vector[2])
    return UsageTable(queues, source)


def load_usage(path: str | Path) -> UsageTable:
    """The table of a file (``-``: standard input), read within the input limits."""
    source = "<stdin>" if str(path) == "-" else str(path)
    try:
        text = read_text_reasoned(path, None, source=source)
    except InputReadError as exc:
        raise UsageFileError(str(exc)) from None
    try:
        raw = yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as exc:
        raise UsageFileError(f"{source}: invalid YAML: {exc}") from None
    return parse_usage(raw if raw is not None else {}, f"file {source}")
