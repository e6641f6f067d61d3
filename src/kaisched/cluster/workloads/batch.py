"""Embedded controllers of the batch family of workloads: the pods their real controllers create."""

from __future__ import annotations

from kaisched.cluster.workloads.base import ControllerFn

CONTROLLERS: dict[tuple[str, str], ControllerFn] = {}
