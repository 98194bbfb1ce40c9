"""The web console (/console): the model repository with live health, a try-it page per family that draws what the
model answered, and rollouts with an admin key. Plain JavaScript and CSS shipped as package data (static/), no build
step; the gateway mounts it unless gateway.console is off."""
from fastapi import FastAPI

from triserve.services.console.router import router

__all__ = ["mount", "router"]


def mount(app: FastAPI, enabled: bool) -> None:
    """Serve the console on `app` when enabled (Settings.gateway.console); off, /console is not there at all."""
    if enabled:
        app.include_router(router)
