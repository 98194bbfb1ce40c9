"""`triserve rollout`: rollouts against a running service through its admin API (services/rollout_api.py), timed.

    triserve rollout status             (also one line per slot: requests per version, the canary's share)
    triserve rollout promote  text 1.0.1-abcdef12
    triserve rollout rollback text
    triserve rollout canary   text 1.0.1-abcdef12 --weight 0.1     (--off to withdraw)
    triserve rollout shadow   text 1.0.1-abcdef12                  (--off to stop)

--url (default http://127.0.0.1:3000, $TRISERVE_URL) and --api-key (default $TRISERVE_ADMIN_KEY: a key with admin:
true in access.api_keys). The answer's JSON goes to stdout, the timing and the split lines to stderr; exit status 0
when the service answered 200, 1 otherwise. The registry-only equivalent (move an alias without touching a running
service) is `triserve registry promote|rollback`.

Part of the product (an operator of an installed wheel has it), so it speaks plain HTTP with httpx, a serving
dependency: the product never imports the client distribution (triserve_client: pyproject's import contracts).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx

PROG = "triserve rollout"


@dataclass(frozen=True)
class AdminCall:
    """One admin request: method, path under the service's URL, JSON body."""

    method: str
    path: str
    body: dict[str, Any] | None = None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("TRISERVE_URL", "http://127.0.0.1:3000"),
                    help="the service's HTTP base URL (default: %(default)s)")
    ap.add_argument("--api-key", default=os.environ.get("TRISERVE_ADMIN_KEY", ""),
                    help="an admin key, sent as X-API-Key (default: $TRISERVE_ADMIN_KEY)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds to wait for the answer: a promote stages, verifies, loads and warms the candidate "
                         "first (default: %(default)s)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="routing per slot: active, loaded, canary, shadow, promotions, measured split")
    p = sub.add_parser("promote", help="stage a version and swap it in atomically, moving the alias")
    p.add_argument("slot")
    p.add_argument("ref", help="a version, an alias, or 'canary' (the current canary's version)")
    p.add_argument("--alias", default="stable")
    r = sub.add_parser("rollback", help="back to what served before the last promote")
    r.add_argument("slot")
    r.add_argument("--alias", default="stable")
    for name, help_ in (("canary", "send a share of the traffic to a version"),
                        ("shadow", "mirror the traffic to a version, compare, never return its answers")):
        c = sub.add_parser(name, help=help_)
        c.add_argument("slot")
        c.add_argument("ref", nargs="?")
        c.add_argument("--off", action="store_true", help=f"withdraw the {name}")
        if name == "canary":
            c.add_argument("--weight", type=float, default=0.1, help="share of the traffic (default: %(default)s)")
    return ap


def admin_call(args: argparse.Namespace) -> AdminCall:
    """The admin API request a parsed command line stands for (ValueError: a canary/shadow without a ref)."""
    base = "/admin/models"
    if args.cmd == "status":
        return AdminCall("GET", base)
    if args.cmd == "promote":
        return AdminCall("POST", f"{base}/{args.slot}/promote", {"ref": args.ref, "alias": args.alias})
    if args.cmd == "rollback":
        return AdminCall("POST", f"{base}/{args.slot}/rollback", {"alias": args.alias})
    if args.off:
        return AdminCall("DELETE", f"{base}/{args.slot}/{args.cmd}")
    if not args.ref:
        raise ValueError(f"{args.cmd} needs a ref (or --off)")
    body: dict[str, Any] = {"ref": args.ref}
    if args.cmd == "canary":
        body["weight"] = args.weight
    return AdminCall("POST", f"{base}/{args.slot}/{args.cmd}", body)


def split_line(slot: str, routing: dict) -> str:
    """One slot's measured split: 'forecast: active 1.0.0; 1.0.0 702 (70.2%), canary 1.0.1 298 (29.8%, weight 0.3);
    1000 requests since 12:00:01'."""
    split = routing.get("split") or {}
    total = split.get("total") or 0
    canary = routing.get("canary") or {}
    parts = []
    for version, n in sorted((split.get("requests") or {}).items(), key=lambda kv: -kv[1]):
        share = f"{n / total:.1%}" if total else "-"
        parts.append(f"canary {version} {n} ({share}, weight {canary['weight']:g})"
                     if version == canary.get("version") else f"{version} {n} ({share})")
    since = time.strftime("%H:%M:%S", time.localtime(split["since"])) if split.get("since") else "-"
    return (f"{slot}: active {routing.get('active')}; " + (", ".join(parts) or "no requests")
            + f"; {total} requests since {since}")


def main(argv: list[str] | None = None, transport: httpx.BaseTransport | None = None) -> int:
    """Run one command; `transport` replaces the network (tests)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        call = admin_call(args)
    except ValueError as exc:
        ap.error(str(exc))
    url = args.url.rstrip("/") + call.path
    started = time.perf_counter()
    try:
        with httpx.Client(transport=transport, timeout=args.timeout) as http:
            resp = http.request(call.method, url, json=call.body, headers={"X-API-Key": args.api_key})
    except httpx.HTTPError as exc:
        print(f"{PROG} {args.cmd}: {call.method} {url} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - started
    try:
        answer = resp.json()
    except ValueError:  # not JSON: a proxy's error page, another server on the port
        answer = None
        print(resp.text)
    if answer is not None:
        print(json.dumps(answer, indent=2))
    if args.cmd == "status" and resp.status_code == 200 and isinstance(answer, dict):
        for slot, routing in answer.items():
            if isinstance(routing, dict):
                print(split_line(slot, routing), file=sys.stderr)
    print(f"{args.cmd}: HTTP {resp.status_code} in {elapsed:.3f}s", file=sys.stderr)
    return 0 if resp.status_code == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
