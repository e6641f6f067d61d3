"""``usageDBConfig``: where time-based fair share reads each queue's historical usage (spec 5.7).

KAI's block, field for field::

    usageDBConfig:
      clientType: prometheus            # prometheus | fake | fake-with-history
      connectionString: http://prometheus.kai-scheduler:9090   # or connectionStringEnvVar: PROMETHEUS_URL
      usageParams:
        windowType: sliding             # sliding (default) | tumbling | cron
        windowSize: 168h                # default one week
        tumblingWindowStartTime: "2026-01-05T00:00:00Z"   # required by tumbling
        cronString: "0 0 * * MON"       # required by cron (kaisched.framework.cron)
        halfLifePeriod: 24h             # unset or <= 0: no decay
        fetchInterval: 1m
        stalenessPeriod: 5m             # raised to fetchInterval when below it
        waitTimeout: 1m
        extraParams:                    # strings, as in KAI
          usageQueryTimeout: 10s
          queryResolution: 1m
          gpuAllocationMetric: kai_queue_allocated_gpus      # ... cpu/memory, and the three capacity queries

Every field is checked when the configuration is loaded and a bad one is a :class:`ConfigError` naming it
(``usageDBConfig.usageParams.windowType: unknown window type 'daily' (known: cron, sliding, tumbling)``), where KAI
falls back to defaults for some (an unparsable extra duration) and fails later for others. The connection string
is resolved when a Prometheus source is made (:meth:`UsageDBConfig.connection`); an unreachable Prometheus is never
a configuration error (the scheduler runs on weight-only division until usage arrives).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kaisched.framework.config import ConfigError
from kaisched.framework.cron import CronError, CronExpression, parse_cron

__all__ = ["CLIENT_TYPES", "EXTRA_PARAMS", "WINDOW_TYPES", "UsageDBConfig", "UsageParams"]

PROMETHEUS, FAKE, FAKE_WITH_HISTORY = "prometheus", "fake", "fake-with-history"
CLIENT_TYPES = (PROMETHEUS, FAKE, FAKE_WITH_HISTORY)
SLIDING, TUMBLING, CRON = "sliding", "tumbling", "cron"
WINDOW_TYPES = (SLIDING, TUMBLING, CRON)
WHERE = "usageDBConfig"
PARAMS = f"{WHERE}.usageParams"

#: extraParams and their defaults (KAI's prometheus client)
EXTRA_PARAMS: dict[str, str] = {
    "usageQueryTimeout": "10s",
    "queryResolution": "1m",
    "gpuAllocationMetric": "kai_queue_allocated_gpus",
    "cpuAllocationMetric": "kai_queue_allocated_cpu_cores",
    "memoryAllocationMetric": "kai_queue_allocated_memory_bytes",
    "gpuCapacityMetric": 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})',
    "cpuCapacityMetric": 'sum(kube_node_status_capacity{resource="cpu"})',
    "memoryCapacityMetric": 'sum(kube_node_status_capacity{resource="memory"})',
}
DURATION_EXTRAS = ("usageQueryTimeout", "queryResolution")


def _duration(raw: Mapping[str, Any], key: str, where: str) -> timedelta | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}.{key}: expected a duration like '10m' or '168h', got {value!r}")
    if isinstance(value, int | float):
        return timedelta(seconds=float(value))
    from kaisched.k8s.quantity import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{where}.{key}: {exc}") from None


def _positive(raw: Mapping[str, Any], key: str, default: timedelta) -> timedelta:
    value = _duration(raw, key, PARAMS)
    if value is None:
        return default
    if value <= timedelta(0):
        raise ConfigError(f"{PARAMS}.{key}: must be a positive duration, got {raw[key]!r}")
    return value


@dataclass(frozen=True, slots=True)
class UsageParams:
    """``usageParams`` with KAI's defaults applied (``half_life`` None: no decay; ``window_start``: tumbling's
    ``tumblingWindowStartTime``; ``cron``: the parsed ``cronString``)."""

    window_type: str = SLIDING
    window_size: timedelta = timedelta(days=7)
    window_start: datetime | None = None
    cron: CronExpression | None = None
    half_life: timedelta | None = None
    fetch_interval: timedelta = timedelta(minutes=1)
    staleness_period: timedelta = timedelta(minutes=5)
    wait_timeout: timedelta = timedelta(minutes=1)
    query_timeout: timedelta = timedelta(seconds=10)
    query_resolution: timedelta = timedelta(minutes=1)
    allocation_metrics: tuple[str, str, str] = (EXTRA_PARAMS["gpuAllocationMetric"],
                                                EXTRA_PARAMS["cpuAllocationMetric"],
                                                EXTRA_PARAMS["memoryAllocationMetric"])
    capacity_metrics: tuple[str, str, str] = (EXTRA_PARAMS["gpuCapacityMetric"], EXTRA_PARAMS["cpuCapacityMetric"],
                                              EXTRA_PARAMS["memoryCapacityMetric"])

    def reset_time(self, now: datetime) -> datetime:
        """Where the window that holds ``now`` starts: ``now - windowSize`` (sliding); the latest multiple of
        ``windowSize`` after ``tumblingWindowStartTime`` (tumbling; ``now`` itself before the start time, as KAI);
        the cron expression's latest occurrence (cron; ``now - windowSize`` if it never fired)."""
        if self.window_type == TUMBLING and self.window_start is not None:
            if self.window_start >= now:
                return now
            periods = (now - self.window_start) // self.window_size
            return self.window_start + periods * self.window_size
        if self.window_type == CRON and self.cron is not None:
            last = self.cron.previous(now)
            return last if last is not None else now - self.window_size
        return now - self.window_size

    @classmethod
    def from_mapping(cls, raw: object) -> UsageParams:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{PARAMS}: expected a mapping (windowType, windowSize, halfLifePeriod, ...)")
        known = ("windowType", "windowSize", "tumblingWindowStartTime", "cronString", "halfLifePeriod",
                 "fetchInterval", "stalenessPeriod", "waitTimeout", "extraParams")
        for key in raw:
            if key not in known:
                raise ConfigError(f"{PARAMS}.{key}: unknown field (known: {', '.join(known)})")
        window_type = raw.get("windowType") or SLIDING
        if window_type not in WINDOW_TYPES:
            raise ConfigError(f"{PARAMS}.windowType: unknown window type {window_type!r} "
                              f"(known: {', '.join(sorted(WINDOW_TYPES))})")
        window_size = _positive(raw, "windowSize", timedelta(days=7))
        start: datetime | None = None
        if raw.get("tumblingWindowStartTime") is not None:
            start = _time(raw["tumblingWindowStartTime"], f"{PARAMS}.tumblingWindowStartTime")
        if window_type == TUMBLING and start is None:
            raise ConfigError(f"{PARAMS}.tumblingWindowStartTime: required by windowType tumbling (an RFC3339 time "
                              "such as 2026-01-05T00:00:00Z)")
        cron: CronExpression | None = None
        cron_text = raw.get("cronString")
        if window_type == CRON or cron_text:
            if not isinstance(cron_text, str) or not cron_text.strip():
                raise ConfigError(f"{PARAMS}.cronString: required by windowType cron (e.g. '0 0 * * MON')")
            try:
                cron = parse_cron(cron_text)
            except CronError as exc:
                raise ConfigError(f"{PARAMS}.cronString: {exc}") from None
        half_life = _duration(raw, "halfLifePeriod", PARAMS)
        if half_life is not None and half_life <= timedelta(0):
            half_life = None  # KAI: <= 0 disables the decay
        fetch = _positive(raw, "fetchInterval", timedelta(minutes=1))
        staleness = max(_positive(raw, "stalenessPeriod", timedelta(minutes=5)), fetch)
        wait = _duration(raw, "waitTimeout", PARAMS)
        if wait is not None and wait < timedelta(0):
            raise ConfigError(f"{PARAMS}.waitTimeout: must be >= 0, got {raw['waitTimeout']!r}")
        extras = _extras(raw.get("extraParams"))
        return cls(
            window_type=window_type, window_size=window_size, window_start=start, cron=cron, half_life=half_life,
            fetch_interval=fetch, staleness_period=staleness,
            wait_timeout=wait if wait is not None else timedelta(minutes=1),
            query_timeout=_extra_duration(extras, "usageQueryTimeout"),
            query_resolution=_extra_duration(extras, "queryResolution"),
            allocation_metrics=(extras["gpuAllocationMetric"], extras["cpuAllocationMetric"],
                                extras["memoryAllocationMetric"]),
            capacity_metrics=(extras["gpuCapacityMetric"], extras["cpuCapacityMetric"],
                              extras["memoryCapacityMetric"]),
        )


def _time(value: object, where: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected an RFC3339 time such as 2026-01-05T00:00:00Z, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{where}: expected an RFC3339 time such as 2026-01-05T00:00:00Z, got {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _extras(raw: object) -> dict[str, str]:
    where = f"{PARAMS}.extraParams"
    if raw is None:
        return dict(EXTRA_PARAMS)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of strings ({', '.join(EXTRA_PARAMS)})")
    out = dict(EXTRA_PARAMS)
    for key, value in raw.items():
        if key not in EXTRA_PARAMS:
            raise ConfigError(f"{where}.{key}: unknown parameter (known: {', '.join(EXTRA_PARAMS)})")
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}.{key}: expected a non-empty string, got {value!r}")
        out[str(key)] = value.strip()
    for key in DURATION_EXTRAS:
        value = _duration(out, key, where)
        if value is None or value <= timedelta(0):
            raise ConfigError(f"{where}.{key}: must be a positive duration, got {out[key]!r}")
    return out


def _extra_duration(extras: Mapping[str, str], key: str) -> timedelta:
    value = _duration(extras, key, f"{PARAMS}.extraParams")
    assert value is not None  # checked by _extras
    return value


@dataclass(frozen=True, slots=True)
class UsageDBConfig:
    """The parsed ``usageDBConfig`` block."""

    client_type: str
    connection_string: str = ""
    connection_string_env_var: str = ""
    params: UsageParams = field(default_factory=UsageParams)

    def connection(self) -> str:
        """The Prometheus URL: ``connectionString``, or the value of ``connectionStringEnvVar`` (a ConfigError
        naming the variable when it is unset or empty)."""
        if self.connection_string:
            return self.connection_string
        value = os.environ.get(self.connection_string_env_var, "").strip()
        if not value:
            raise ConfigError(f"{WHERE}.connectionStringEnvVar: the environment variable "
                              f"{self.connection_string_env_var} is not set")
        return value

    @classmethod
    def from_mapping(cls, raw: object) -> UsageDBConfig:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{WHERE}: expected a mapping (clientType, connectionString, usageParams)")
        known = ("clientType", "connectionString", "connectionStringEnvVar", "usageParams")
        for key in raw:
            if key not in known:
                raise ConfigError(f"{WHERE}.{key}: unknown field (known: {', '.join(known)})")
        client = raw.get("clientType")
        if not client:
            raise ConfigError(f"{WHERE}.clientType: required (one of {', '.join(CLIENT_TYPES)})")
        if client not in CLIENT_TYPES:
            raise ConfigError(f"{WHERE}.clientType: unknown client type {client!r} (known: {', '.join(CLIENT_TYPES)})")
        conn = raw.get("connectionString") or ""
        env = raw.get("connectionStringEnvVar") or ""
        if not isinstance(conn, str) or not isinstance(env, str):
            raise ConfigError(f"{WHERE}.connectionString: expected a string (a URL such as http://prometheus:9090)")
        if conn and env:
            raise ConfigError(f"{WHERE}: connectionString and connectionStringEnvVar are both set; set one")
        if client == PROMETHEUS and not conn and not env:
            raise ConfigError(f"{WHERE}.connectionString: required by clientType prometheus (or set "
                              "connectionStringEnvVar)")
        return cls(client, conn.strip(), env.strip(), UsageParams.from_mapping(raw.get("usageParams")))
