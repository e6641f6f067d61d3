"""A read-only web dashboard: the queue tree with fair share, deserved and allocation, pending jobs with their
reasons and explanations, recent decisions and GPU utilisation (docs/dashboard.md).

Above the core and :mod:`kaisched.explain`, below :mod:`kaisched.cli`: ``kaisched dashboard`` serves it alone,
``kaisched run`` adds its routes to Kubernetes mode's health server (which knows only a generic route hook)."""

from __future__ import annotations

from kaisched.web.http import DashboardServer, handle
from kaisched.web.model import Dashboard, History, NotFound, build_document

__all__ = ["Dashboard", "DashboardServer", "History", "NotFound", "build_document", "handle"]
