"""Kubernetes mode: ``kaisched run`` schedules a real cluster through its API server.

A layer beside :mod:`kaisched.sim`: it may import :mod:`kaisched.cluster` and everything below it, and
nothing below imports it. ``kaisched.cli`` imports it only inside the ``run`` subcommand.
"""
