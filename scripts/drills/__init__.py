"""Fault drills against a real `bentoml serve` subprocess: each prints a short summary and saves JSON to docs/drills/.

    python -m scripts.drills.kill_runner      # SIGKILL the runner worker under load: failures, recovery, restart
    python -m scripts.drills.overload         # capacity, then 3x open-loop arrivals: rejects, latency, recovery
    python -m scripts.drills.slow_model       # slow primary vs 300/1000/3000 ms deadlines, primary and auto
    python -m scripts.drills.corrupt_model    # one corrupted byte in a model file: not ready, the reason, recovery
    python -m scripts.drills.schemathesis_run # property-based API run against /openapi.json
    python -m scripts.drills.starts --times 5 # every drill's start phase alone, 5 times in a row, counted

Every drill that starts servers takes --starts N: its start phase alone (its servers with its settings, ready, one
request checked, stopped), N times in a row (scripts/drills/starts.py).

Every drill starts its own server on a free loopback port (scripts/drills/server.py), takes --registry (default
models/store), and is bounded in request count and time.
"""
