"""The real :class:`~kaisched.kube.api.Api`: JSON over a synchronous ``httpx2.Client``.

Configuration and authentication come from lightkube (kubeconfig files, in-cluster service accounts,
bearer tokens, client certificates, exec plugins): lightkube's ``ConnectionParams.httpx_params`` gives the
settings of an authenticated ``httpx2.Client`` (we add the pool limits) and everything else (paths, JSON,
errors, watch streams) is ours.
Bodies are encoded and decoded with msgspec. The client is safe to share between threads; its connection
pool (:data:`POOL_LIMITS`) keeps up to 128 connections alive, so that the writer's requests (up to 64 in
flight, :class:`~kaisched.kube.concurrency.AdaptiveLimit`) and the informers' watches all reuse persistent
connections instead of paying a TLS handshake per request once more than httpx's default 20 are busy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx2
import msgspec
import yaml
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SERVICE_ACCOUNT, KubeConfig, SingleConfig
from lightkube.config.models import User
from lightkube.core.exceptions import ConfigError

from kaisched.k8s.loader import InputLimits, InputReadError, read_text_reasoned
from kaisched.kube.api import JSON, Api, ApiError, Response
from kaisched.kube.lean_http import LeanHttp, LeanTransportError

__all__ = ["DEFAULT_KUBECONFIG", "KubeClient", "KubeConfigError", "status_reason"]

DEFAULT_KUBECONFIG = "~/.kube/config"
USER_AGENT = "kaisched/0.1"

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

#: persistent connections: every connection the writer and the watches open at once is kept alive and reused
POOL_LIMITS = httpx2.Limits(max_connections=128, max_keepalive_connections=128, keepalive_expiry=30.0)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class KubeConfigError(ValueError):
    """No usable Kubernetes configuration: a missing or malformed kubeconfig, context or service account."""


def status_reason(status: int) -> str:
    """The Kubernetes ``Status.reason`` conventionally used with an HTTP status code."""
    return _REASONS.get(status, "InternalError" if status >= 500 else "Unknown")


def retry_after_seconds(value: str | None) -> float | None:
    """The ``Retry-After`` header's delay in seconds (the API server sends whole seconds; an HTTP date or garbage
    is ignored: None)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 and seconds == seconds else None


def _error_from(status: int, content: bytes, what: str, retry_after: float | None = None) -> ApiError:
    """An :class:`ApiError` from a non-2xx answer, using the ``Status`` object when the server sent one."""
    body: JSON = None
    try:
        body = _decoder.decode(content) if content else None
    except msgspec.DecodeError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        reason = body.get("reason") or status_reason(status)
        message = body.get("message") or what
        return ApiError(status, str(reason), str(message), body, retry_after=retry_after)
    text = content.decode("utf-8", "replace").strip()[:500]
    return ApiError(status, status_reason(status), f"{what}: {text}" if text else what, body, retry_after=retry_after)


def _transport_error(exc: httpx2.HTTPError, what: str) -> ApiError:
    reason = "Timeout" if isinstance(exc, httpx2.TimeoutException) else "ConnectionError"
    detail = str(exc) or type(exc).__name__
    return ApiError(0, reason, f"{what}: {detail}")


class KubeClient:
    """An :class:`~kaisched.kube.api.Api` on an ``httpx2.Client``; use one of the ``from_*`` constructors."""

    def __init__(self, http: httpx2.Client, *, namespace: str = "default") -> None:
        self._http = http
        self._namespace = namespace
        # plain requests over a persistent connection per thread where that sends what http would (lean_http.py)
        self._lean = LeanHttp.of(http)

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def from_config(
        cls,
        config: SingleConfig,
        *,
        timeout: float = 10.0,
        transport: httpx2.BaseTransport | None = None,
        trust_env: bool = True,
    ) -> KubeClient:
        """From one lightkube ``SingleConfig`` (a resolved kubeconfig context)."""
        if config.user is None:  # a context without a user: no authentication (lightkube would assert)
            config = config._replace(user=User())
        params = client_adapter.ConnectionParams(
            timeout=httpx2.Timeout(timeout), trust_env=trust_env, transport=transport
        )
        try:
            http = httpx2.Client(**params.httpx_params(config), limits=POOL_LIMITS)
        except (ConfigError, OSError, ValueError) as exc:
            raise KubeConfigError(f"Kubernetes context {config.context_name!r}: {exc}") from exc
        http.headers["User-Agent"] = USER_AGENT
        http.headers["Accept"] = "application/json"
        return cls(http, namespace=config.namespace)

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str] | None = None, context: str | None = None, *, timeout: float = 10.0,
        limits: InputLimits | None = None,
    ) -> KubeClient:
        """From a kubeconfig file: ``path``, else ``$KUBECONFIG``, else ``~/.kube/config``.

        ``context`` selects a context; the file's ``current-context`` by default. The file is read within
        ``limits`` (default :meth:`InputLimits.from_env`).
        """
        if path is None:
            found = _kubeconfig_from_env_var()
            path = found if found is not None else DEFAULT_KUBECONFIG
        return cls.from_config(_load_kubeconfig(path, context, limits), timeout=timeout)

    @classmethod
    def in_cluster(cls, service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT, *,
                   timeout: float = 10.0) -> KubeClient:
        """From the pod's service account (token, CA and namespace files, ``KUBERNETES_SERVICE_HOST/PORT``)."""
        return cls.from_config(_load_service_account(service_account_dir), timeout=timeout)

    @classmethod
    def from_env(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT,
        timeout: float = 10.0,
        limits: InputLimits | None = None,
    ) -> KubeClient:
        """The first that applies: ``kubeconfig``, ``$KUBECONFIG``, the in-cluster service account,
        ``~/.kube/config``. Raises :class:`KubeConfigError` naming what was tried when none does. A
        kubeconfig file is read within ``limits`` (default :meth:`InputLimits.from_env`)."""
        if kubeconfig is not None:
            return cls.from_config(_load_kubeconfig(kubeconfig, context, limits), timeout=timeout)
        found = _kubeconfig_from_env_var()
        if found is not None:
            return cls.from_config(_load_kubeconfig(found, context, limits), timeout=timeout)
        if os.environ.get("KUBERNETES_SERVICE_HOST") and Path(service_account_dir, "token").is_file():
            return cls.from_config(_load_service_account(service_account_dir), timeout=timeout)
        default = Path(DEFAULT_KUBECONFIG).expanduser()
        if default.is_file():
            return cls.from_config(_load_kubeconfig(default, context, limits), timeout=timeout)
        raise KubeConfigError(
            "no Kubernetes configuration: no --kubeconfig given, $KUBECONFIG "
            f"{'names no existing file' if os.environ.get('KUBECONFIG') else 'unset'}, not in a cluster "
            f"(no $KUBERNETES_SERVICE_HOST or no {Path(service_account_dir, 'token')}), and no {default}"
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        token: str | None = None,
        namespace: str = "default",
        insecure: bool = False,
        timeout: float = 10.0,
        transport: httpx2.BaseTransport | None = None,
        trust_env: bool = True,
    ) -> KubeClient:
        """A server URL and an optional bearer token, through lightkube's config (a one-context kubeconfig)."""
        user: dict[str, Any] = {"token": token} if token else {}
        conf = {
            "clusters": [{"name": "c", "cluster": {"server": url, "insecure-skip-tls-verify": insecure}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
            "current-context": "ctx",
        }
        single = _select(KubeConfig.from_dict(conf), None, url)
        return cls.from_config(single, timeout=timeout, transport=transport, trust_env=trust_env)

    @classmethod
    def for_transport(
        cls,
        transport: httpx2.BaseTransport,
        base_url: str = "https://kubernetes.test",
        *,
        namespace: str = "default",
        timeout: float = 10.0,
    ) -> KubeClient:
        """A client on a given transport (``httpx2.MockTransport`` in tests); no authentication."""
        http = httpx2.Client(
            transport=transport,
            base_url=base_url,
            timeout=httpx2.Timeout(timeout),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            limits=POOL_LIMITS,
        )
        return cls(http, namespace=namespace)

    # -- properties ---------------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """The default namespace of the configuration (the context's, or the service account's)."""
        return self._namespace

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    @property
    def http(self) -> httpx2.Client:
        """The underlying authenticated ``httpx2.Client`` (for calls the :class:`Api` seam does not cover)."""
        return self._http

    # -- the Api protocol ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: JSON = None,
        content_type: str = "application/json",
    ) -> Response:
        what = f"{method} {path}"
        headers: dict[str, str] = {}
        content: bytes | None = None
        if body is not None:
            content = body if isinstance(body, bytes) else _encoder.encode(body)
            headers["Content-Type"] = content_type
        if self._lean is not None:
            try:
                answer = self._lean.request(method, path, params=params, content=content,
                                            content_type=content_type)
            except LeanTransportError as exc:
                raise ApiError(0, "Timeout" if exc.timeout else "ConnectionError", f"{what}: {exc}") from exc
            if not 200 <= answer.status < 300:
                raise _error_from(answer.status, answer.content, what,
                                  retry_after_seconds(answer.headers.get("retry-after")))
            return Response(answer.status, _decode_body(answer.content, answer.headers.get("content-type", ""), what))
        try:
            resp = self._http.request(method, path, params=dict(params) if params else None, content=content,
                                      headers=headers)
        except httpx2.HTTPError as exc:
            raise _transport_error(exc, what) from exc
        data = resp.content
        if not 200 <= resp.status_code < 300:
            raise _error_from(resp.status_code, data, what, retry_after_seconds(resp.headers.get("retry-after")))
        return Response(resp.status_code, _decode_body(data, resp.headers.get("content-type", ""), what))

    def stream(self, path: str, *, params: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Iterator[JSON]:
        """GET ``path`` with ``watch=true`` (unless ``params`` has ``watch``) and yield each JSON line.

        ``timeout`` is the read timeout between two lines (None: wait for ever; set it above the
        watch's ``timeoutSeconds``). Errors, before or during the stream, raise :class:`ApiError`.
        """
        query = dict(params) if params else {}
        query.setdefault("watch", "true")
        what = f"WATCH {path}"
        limits = httpx2.Timeout(self._http.timeout.connect, read=timeout)
        try:
            with self._http.stream("GET", path, params=query, timeout=limits) as resp:
                if not 200 <= resp.status_code < 300:
                    raise _error_from(resp.status_code, resp.read(), what)
                for line in resp.iter_lines():
                    if not line.strip():
                        continue
                    try:
                        yield _decoder.decode(line)
                    except msgspec.DecodeError as exc:
                        raise ApiError(0, "InvalidResponse", f"{what}: undecodable watch line {line[:200]!r}") from exc
        except httpx2.HTTPError as exc:
            raise _transport_error(exc, what) from exc

    # -- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._lean is not None:
            self._lean.close()
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _decode_body(data: bytes, content_type: str, what: str) -> JSON:
    if not data:
        return None
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        if "json" in content_type:
            raise ApiError(0, "InvalidResponse", f"{what}: undecodable JSON answer {data[:200]!r}") from exc
        return data.decode("utf-8", "replace")


def _kubeconfig_from_env_var() -> Path | None:
    value = os.environ.get("KUBECONFIG", "")
    for part in value.split(os.pathsep):
        if part and Path(part).expanduser().is_file():
            return Path(part).expanduser()
    return None


def _load_kubeconfig(path: str | os.PathLike[str], context: str | None,
                     limits: InputLimits | None = None) -> SingleConfig:
    """A kubeconfig file (a FIFO too: ``--kubeconfig <(kubectl config view --raw)``), read within ``limits``
    (default :meth:`InputLimits.from_env`)."""
    file = Path(path).expanduser()
    source = f"kubeconfig {str(path)!r}"
    if not file.exists() or file.is_dir():
        raise KubeConfigError(f"{source}: no such file")
    try:
        text = read_text_reasoned(file, limits, source=source)
    except InputReadError as exc:
        raise KubeConfigError(str(exc)) from None
    try:
        conf = KubeConfig.from_dict(yaml.safe_load(text), fname=file)
    except (ConfigError, OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError,
            msgspec.ValidationError) as exc:
        raise KubeConfigError(f"{source}: malformed: {exc}") from exc
    return _select(conf, context, str(path))


def _select(conf: KubeConfig, context: str | None, source: str) -> SingleConfig:
    try:
        single = conf.get(context)
    except ConfigError as exc:
        raise KubeConfigError(f"kubeconfig {source!r}: {exc}") from exc
    except KeyError as exc:
        raise KubeConfigError(f"kubeconfig {source!r}: context {context or conf.current_context!r} "
                              f"names a missing cluster or user {exc}") from exc
    if single is None:  # pragma: no cover - get() without a default never returns None
        raise KubeConfigError(f"kubeconfig {source!r}: no context")
    return single


def _load_service_account(service_account_dir: str | os.PathLike[str]) -> SingleConfig:
    try:
        conf = KubeConfig.from_service_account(service_account_dir)
    except ConfigError as exc:
        raise KubeConfigError(f"in-cluster configuration: {exc}") from exc
    except KeyError as exc:
        raise KubeConfigError(f"in-cluster configuration: environment variable {exc} is not set") from exc
    return _select(conf, None, f"service account {service_account_dir}")


if TYPE_CHECKING:  # KubeClient implements the Api protocol (checked by mypy)
    _api: Api = KubeClient(httpx2.Client())
