"""Plugin names -> implementations, and building a session's plugin list from the configuration."""

from __future__ import annotations

from collections.abc import Mapping

from kaisched.framework.config import ConfigError, PluginOption, SchedulerConfig
from kaisched.framework.plugin import Plugin
from kaisched.plugins.affinity_scoring import PodAffinityPlugin
from kaisched.plugins.dynamicresources import DynamicResourcesPlugin
from kaisched.plugins.fragmentation import FragmentationPlugin
from kaisched.plugins.gpu_sharing import GpuPackPlugin, GpuSharingOrderPlugin, GpuSpreadPlugin
from kaisched.plugins.minruntime import MinRuntimePlugin
from kaisched.plugins.ordering import (
    ElasticPlugin,
    KubeflowPlugin,
    PriorityPlugin,
    RayPlugin,
    SubGroupOrderPlugin,
    TaskOrderPlugin,
)
from kaisched.plugins.predicates import PredicatesPlugin
from kaisched.plugins.proportion.plugin import ProportionPlugin
from kaisched.plugins.scoring import (
    NodeAvailabilityPlugin,
    NodePlacementPlugin,
    NominatedNodePlugin,
    ResourceTypePlugin,
)
from kaisched.plugins.topology import TopologyPlugin

PLUGINS: Mapping[str, type[Plugin]] = {
    cls.name: cls
    for cls in (
        PredicatesPlugin,
        ProportionPlugin,
        PriorityPlugin,
        ElasticPlugin,
        KubeflowPlugin,
        RayPlugin,
        NodeAvailabilityPlugin,
        ResourceTypePlugin,
        SubGroupOrderPlugin,
        TaskOrderPlugin,
        NominatedNodePlugin,
        NodePlacementPlugin,
        PodAffinityPlugin,
        MinRuntimePlugin,
        GpuPackPlugin,
        GpuSpreadPlugin,
        GpuSharingOrderPlugin,
        TopologyPlugin,
        DynamicResourcesPlugin,
        FragmentationPlugin,
    )
}

# KAI plugins for KAI's HTTP debug endpoints, and KAI's (v0.16+) eviction scenario generators, which kaisched's
# victim search has built in (kaisched.actions.solver). They are accepted in configurations so KAI's configs load
# unchanged; see docs/compatibility.md.
SCENARIO_GENERATOR_PLUGINS = ("sg-nodelocalgreedy", "sg-multinodegang")
ACCEPTED_WITHOUT_EFFECT = frozenset({"snapshot", "reflectjoborder", *SCENARIO_GENERATOR_PLUGINS})


def validate_plugins(config: SchedulerConfig) -> None:
    for opt in config.plugins:
        if opt.name not in PLUGINS and opt.name not in ACCEPTED_WITHOUT_EFFECT:
            known = ", ".join(sorted({*PLUGINS, *ACCEPTED_WITHOUT_EFFECT}))
            raise ConfigError(f"tiers: unknown plugin {opt.name!r} (known: {known})")
        if opt.name in PLUGINS:
            PLUGINS[opt.name](opt.arguments)  # validates arguments


def build_plugins(options: tuple[PluginOption, ...]) -> list[Plugin]:
    return [PLUGINS[opt.name](opt.arguments) for opt in options if opt.name in PLUGINS]
