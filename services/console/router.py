"""The console's routes: the page and its assets (package data, served from the wheel) and the repository page's live
figures (/console/api/summary).

Every console response carries a Content-Security-Policy that allows only the console's own scripts and styles (no
inline script, no eval, no other origin), so a model label or error text that reaches the page as markup could not
run even where the page forgot to render it as text. The page itself holds no data: it calls the public API
(/v1/models, /v1/<family>, /admin/...) with the keys typed into it, so it can do nothing the API would refuse.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from triserve.kernel.errors import ApiError
from triserve.services.console.summary import NAMES, summarize
from triserve.services.protocols.statistics import read_samples

STATIC = Path(__file__).resolve().parent / "static"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
# what the page may load and where it may connect: itself only; images also from data:/blob: URLs (the user's photo)
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-cache"}

router = APIRouter(prefix="/console", tags=["console"], include_in_schema=False)


def assets() -> dict[str, Path]:
    """The console's files by name (a fixed set read once: a request names one of them, never a path)."""
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in MEDIA_TYPES}


ASSETS = assets()


@router.get("")
async def console_root() -> Response:
    return RedirectResponse("/console/", status_code=307, headers=HEADERS)


@router.get("/")
async def console_page() -> Response:
    return FileResponse(ASSETS["index.html"], media_type=MEDIA_TYPES[".html"], headers=HEADERS)


@router.get("/static/{name}")
async def console_asset(name: str) -> Response:
    path = ASSETS.get(name)
    if path is None:
        raise ApiError(404, "not_found", f"no console asset {name!r}", {"assets": sorted(ASSETS)})
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)


@router.get("/api/summary")
async def console_summary() -> Response:
    """Live figures per deployment and slot, cumulative since the server started, over every process (the numbers
    /metrics exports: public there too)."""
    samples = await asyncio.to_thread(read_samples, None, NAMES)
    return JSONResponse(summarize(samples, time.time()), headers=HEADERS)
