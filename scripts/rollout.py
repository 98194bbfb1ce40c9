"""Rollout commands against a running service (admin key required), timed.

    python -m scripts.rollout status            (also one line per slot: requests per version, the canary's share)
    python -m scripts.rollout promote  text 1.0.1-abcdef12
    python -m scripts.rollout rollback text
    python -m scripts.rollout canary   text 1.0.1-abcdef12 --weight 0.1     (--off to withdraw)
    python -m scripts.rollout shadow   text 1.0.1-abcdef12                  (--off to stop)

--url (default http://127.0.0.1:3000) and --api-key (default $TRISERVE_ADMIN_KEY). The registry-only equivalent
(move an alias without touching a running service) is `python -m models.cli promote|rollback`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import httpx


def split_line(slot: str, routing: dict) -> str:
    """One slot's measured split: 'forecast: 1.0.0 702 (70.2%), canary 1.0.1 298 (29.8%, weight 0.3), 1000 requests
    since 12:00:01'."""
    split = routing.get("split") or {}
    total = split.get("total") or 0
    canary = routing.get("canary") or {}
    parts = []
    for version, n in sorted((split.get("requests") or {}).items(), key=lambda kv: -kv[1]):
        share = f"{n / total:.1%}" if total else "-"
        role = f"canary {version} {n} ({share}, weight {canary['weight']:g})" if version == canary.get("version") \
            else f"{version} {n} ({share})"
        parts.append(role)
    since = time.strftime("%H:%M:%S", time.localtime(split["since"])) if split.get("since") else "-"
    active = routing.get("active")
    return f"{slot}: active {active}; " + (", ".join(parts) or "no requests") + f"; {total} requests since {since}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.rollout", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:3000")
    ap.add_argument("--api-key", default=os.environ.get("TRISERVE_ADMIN_KEY", ""))
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status")
    p = sub.add_parser("promote")
    p.add_argument("slot")
    p.add_argument("ref")
    p.add_argument("--alias", default="stable")
    r = sub.add_parser("rollback")
    r.add_argument("slot")
    r.add_argument("--alias", default="stable")
    for name in ("canary", "shadow"):
        c = sub.add_parser(name)
        c.add_argument("slot")
        c.add_argument("ref", nargs="?")
        c.add_argument("--off", action="store_true")
        if name == "canary":
            c.add_argument("--weight", type=float, default=0.1)
    args = ap.parse_args(argv)
    base = f"{args.url}/admin/models"
    if args.cmd == "status":
        method, url, body = "GET", base, None
    elif args.cmd == "promote":
        method, url, body = "POST", f"{base}/{args.slot}/promote", {"ref": args.ref, "alias": args.alias}
    elif args.cmd == "rollback":
        method, url, body = "POST", f"{base}/{args.slot}/rollback", {"alias": args.alias}
    elif args.off:
        method, url, body = "DELETE", f"{base}/{args.slot}/{args.cmd}", None
    else:
        if not args.ref:
            ap.error(f"{args.cmd} needs a ref (or --off)")
        body = {"ref": args.ref, **({"weight": args.weight} if args.cmd == "canary" else {})}
        method, url = "POST", f"{base}/{args.slot}/{args.cmd}"
    started = time.perf_counter()
    resp = httpx.request(method, url, json=body, headers={"X-API-Key": args.api_key}, timeout=300)
    elapsed = time.perf_counter() - started
    print(json.dumps(resp.json(), indent=2))
    if args.cmd == "status" and resp.status_code == 200:
        for slot, routing in resp.json().items():
            if isinstance(routing, dict):
                print(split_line(slot, routing), file=sys.stderr)
    print(f"{args.cmd}: HTTP {resp.status_code} in {elapsed:.3f}s", file=sys.stderr)
    return 0 if resp.status_code == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
