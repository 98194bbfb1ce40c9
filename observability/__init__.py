"""Process-level pieces both tiers share (the gateway and the runner): Prometheus metrics, JSON logs, tracing
settings, malloc hygiene, heap snapshots. Nothing here knows a model family, a deployment or a tier."""
