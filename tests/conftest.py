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

settings.register_profile("kaisched", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kaisched"))


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
