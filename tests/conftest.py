"""Test-suite configuration.

Hypothesis runs derandomized by default so that CI is reproducible (the same examples every run);
``HYPOTHESIS_PROFILE=explore`` draws fresh random examples for a deeper search.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

import kaisched

settings.register_profile("kaisched", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kaisched"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``interpreted`` observe the core's internals by replacing its functions (a compiled caller
    calls the original directly) or by weak references (compiled classes take none): skipped on the compiled
    core, where ``tests/compiled`` and the rest of the suite check it."""
    if not kaisched.compiled():
        return
    skip = pytest.mark.skip(reason="observes internals the compiled core does not expose")
    for item in items:
        if "interpreted" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_kaisched_logger() -> Iterator[None]:
    """``kaisched.kube.logs.configure`` takes over the ``kaisched`` standard-library logger (as ``kaisched run``
    wants); give every test the logger as it was."""
    std = logging.getLogger("kaisched")
    saved = (list(std.handlers), std.level, std.propagate)
    yield
    std.handlers[:] = saved[0]
    std.setLevel(saved[1])
    std.propagate = saved[2]
