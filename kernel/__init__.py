"""The serving kernel: what every request needs whatever its family or transport.

Below the families and the transports (import direction: kernel < families < transports < gateway, checked by
`make lint` with import-linter, contracts in pyproject.toml [tool.importlinter]):

- `errors`, `schemas`: the error types and body, the pure response envelope (timings, served model);
- `request_context`: the request id, the per-stage clock and the access-log record of one request;
- `family`: the family contract (`Family`) that families/<name>/ implement, and its tensor metadata;
- `protection/`: admission (queue wait model, shedding), API keys and rate limits, breakers, deadlines;
- `routing/`: the request plan (primary/fallback slot, stable/canary/shadow version), rollouts, drift signals;
- `runner_call/`: the call to the runner tier and the gateway-side adaptive batcher;
- `context`: `ServingContext`, the catalog of served models and the wiring of the pieces above for one process.

Callers (families, transports, the gateway) import these modules; nothing here imports the families package or a
transport. `context` finds a deployment's family by name in the registry below it (configs/families.py: discovery,
not an import).
"""
