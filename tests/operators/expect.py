"""What KAI's pod-grouper gives a workload (spec 10.2, 10.3), checked on the PodGroup kaisched wrote."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

QUEUE_LABEL = "kai.scheduler/queue"


def assert_pod_group(group: Mapping[str, Any], top_owner: Mapping[str, Any], *, min_member: int, queue: str,
                     priority: str, sub_groups: Mapping[str, int] | None = None) -> None:
    """``group`` is the PodGroup of the workload ``top_owner`` (the object as the API returned it): named
    ``pg-<owner>-<uid>``, owned by it, with this minMember, queue and priority class, carrying the owner's
    labels, and with exactly these ``{subgroup: minMember}`` when given."""
    meta = top_owner["metadata"]
    where = f"PodGroup {group['metadata']['name']} of {top_owner['kind']} {meta['name']}"
    assert group["metadata"]["name"] == f"pg-{meta['name']}-{meta['uid']}", where
    owners = [(r["apiVersion"], r["kind"], r["name"], r["uid"]) for r in group["metadata"].get("ownerReferences", ())]
    assert owners == [(top_owner["apiVersion"], top_owner["kind"], meta["name"], meta["uid"])], (where, owners)
    spec = group["spec"]
    assert spec["minMember"] == min_member, (where, spec)
    assert spec["queue"] == queue, (where, spec)
    assert spec.get("priorityClassName") == priority, (where, spec)
    labels = group["metadata"].get("labels") or {}
    for key, value in (meta.get("labels") or {}).items():
        assert labels.get(key) == value, (where, f"label {key} of the top owner not copied", labels)
    if sub_groups is not None:
        got = {sg["name"]: sg["minMember"] for sg in spec.get("subGroups") or ()}
        assert got == dict(sub_groups), (where, spec.get("subGroups"))
