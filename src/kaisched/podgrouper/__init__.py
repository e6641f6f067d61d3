"""The pod-grouper (spec 10): which PodGroup each pod belongs to, for every workload kind KAI supports."""

from kaisched.podgrouper.grouper import group_pods, kind_defaults, plan_for

__all__ = ["group_pods", "kind_defaults", "plan_for"]
