"""Usage sources for time-based fair share (spec 5.7): each makes a :class:`~kaisched.model.usage.UsageTable`
that a cycle takes as its input, outside the cycle.

* :mod:`kaisched.usage.history`: the allocation history kept in memory on the cycle's clock (the embedded cluster
  and the simulator; KAI's ``fake-with-history``);
* :mod:`kaisched.usage.file`: a table from a file (``kaisched schedule --usage FILE``);
* :mod:`kaisched.usage.prometheus`: PromQL over a real Prometheus, fetched in the background (Kubernetes mode,
  ``clientType: prometheus``).
"""
