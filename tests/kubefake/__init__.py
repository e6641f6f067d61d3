"""A fake Kubernetes API server for the integration tests of Kubernetes mode (:mod:`tests.kubefake.server`)."""

from tests.kubefake.server import FakeApiServer, Gate, RequestRecord, Resource

__all__ = ["FakeApiServer", "Gate", "RequestRecord", "Resource"]
