"""KAI's operator objects on a cluster: the ``SchedulingShard`` a scheduler is configured from and the ``kai-config``
``Config`` (``kai.scheduler/v1``, cluster-scoped), read with GETs (:mod:`kaisched.framework.kai_operator` renders
them as KAI's operator does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kaisched.framework.kai_operator import ShardConfig, shard_config
from kaisched.kube.api import Api, ApiError

SHARDS_PATH: Final = "/apis/kai.scheduler/v1/schedulingshards"
CONFIGS_PATH: Final = "/apis/kai.scheduler/v1/configs"
KAI_CONFIG_NAME: Final = "kai-config"


def _get(api: Api, path: str) -> Mapping[str, Any] | None:
    """The object at ``path``; None when the server has no such object or kind (404)."""
    try:
        body = api.request("GET", path).body
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return body if isinstance(body, Mapping) else None


def read_kai_objects(api: Api, shard: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The SchedulingShard ``shard`` and the ``kai-config`` Config (None for either that is not there); an
    :class:`ApiError` for any other refusal."""
    return _get(api, f"{SHARDS_PATH}/{shard}"), _get(api, f"{CONFIGS_PATH}/{KAI_CONFIG_NAME}")


def shard_from_cluster(api: Api, shard: str) -> ShardConfig | None:
    """The configuration KAI's operator renders for SchedulingShard ``shard`` on the cluster (None: no such shard).
    Raises :class:`ApiError` (the cluster refused, 403 included) or ``ConfigError`` (a shard kaisched cannot use)."""
    shard_obj, config_obj = read_kai_objects(api, shard)
    return None if shard_obj is None else shard_config(shard_obj, config_obj)
