"""Test-suite configuration.

Hypothesis runs derandomized by default so that CI is reproducible (the same examples every run);
``HYPOTHESIS_PROFILE=explore`` draws fresh random examples for a deeper search.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("kaisched", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kaisched"))
