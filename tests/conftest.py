"""Test-suite configuration.

Hypothesis runs derandomized by default so that CI is reproducible (the same examples every run);
``HYPOTHESIS_PROFILE=explore`` draws fresh random examples for a deeper search, and ``HYPOTHESIS_PROFILE=fuzz``
(what ``make fuzz`` runs, round after round) does so without an example database. A test's own
``@settings(max_examples=...)`` wins over a profile's count. ``--hypothesis-seed=N`` reproduces a run with fresh
examples: a derandomized test ignores the seed, so giving one switches the default profile to ``fuzz``.
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
# fresh examples, nothing kept between runs (a failure is reproduced from the seed make fuzz prints), and the
# blob of the failing example printed too (``@reproduce_failure``)
settings.register_profile("fuzz", derandomize=False, database=None, print_blob=True)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "kaisched")
settings.load_profile(PROFILE)


def pytest_configure(config: pytest.Config) -> None:
    """``--hypothesis-seed`` under the derandomized default profile: the seed would be ignored (a derandomized test
    draws from its own digest), so the run draws fresh examples from the seed (profile ``fuzz``). Before the test
    modules are imported, so their ``settings`` inherit it."""
    if PROFILE == "kaisched" and config.getoption("--hypothesis-seed", default=None) is not None:
        settings.load_profile("fuzz")


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
