"""Groupers of the kubeflow family of workloads (spec 10.3)."""

from __future__ import annotations

from kaisched.podgrouper.base import GroupFn

GROUPERS: dict[tuple[str, str], GroupFn] = {}
