"""Routing: the request plan (slot, version, fallback), rollouts (hot swap, canary, shadow) and drift signals."""
