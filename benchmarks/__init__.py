"""Scale benchmarks of one kaisched allocate cycle: ``python -m benchmarks --help``.

``clusters`` generates the clusters (deterministically), ``allocate`` times and checks the cycle.
"""
