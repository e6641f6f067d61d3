"""The proportion plugin: fair-share division, queue ordering and reclaim rules (spec section 5)."""
