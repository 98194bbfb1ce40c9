"""What the console's browser test modules share: a tab that collects console errors and answers confirmations, a
poll that needs no eval (the page's CSP forbids Playwright's wait_for_function), and the API read with a key."""
from __future__ import annotations

import time

import httpx

from scripts.console_screenshots import ADMIN_KEY, USER_KEY, key_script

__all__ = ["ADMIN_KEY", "USER_KEY", "Tab", "api", "deployments", "until"]


class Tab:
    """A page of a fresh browser context on the server, with every console error and page error collected.

    keys: "user" (the inference key, the default: the demo server requires one), "admin" (both keys) or "none", put
    in sessionStorage as typing them into the page's header does. Confirmations are recorded and accepted, or
    dismissed when `accept_dialogs` is False."""

    def __init__(self, browser, url: str, width: int = 1280, height: int = 800, keys: str = "user"):
        self.context = browser.new_context(base_url=url, viewport={"width": width, "height": height})
        self.context.add_init_script(key_script(keys))
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.dialogs: list[str] = []
        self.accept_dialogs = True
        self.page.on("dialog", self._dialog)
        self.sent: list[tuple[str, str, str | None]] = []  # (method, url, X-API-Key) of every request
        self.page.on("request", lambda r: self.sent.append((r.method, r.url, r.headers.get("x-api-key"))))

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.accept() if self.accept_dialogs else dialog.dismiss()

    def errors_besides(self, *statuses: int) -> list[str]:
        """The console errors other than the browser's own log of these HTTP statuses ("Failed to load resource")."""
        return [e for e in self.errors if not any(f"status of {s}" in e for s in statuses)]


def until(check, timeout: float = 20.0, what: str = ""):
    """Poll check() until it is truthy."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.1)
    return result


def api(url: str, method: str, path: str, key: str | None = USER_KEY, **kwargs) -> httpx.Response:
    """The public API as a client calls it (the demo server requires a key for inference and metadata)."""
    headers = {"X-API-Key": key} if key else {}
    return httpx.request(method, url + path, headers=headers, timeout=60, **kwargs)


def deployments(url: str) -> dict[str, dict]:
    """/v1/models' deployments by name."""
    answer = api(url, "GET", "/v1/models")
    answer.raise_for_status()
    return {d["name"]: d for d in answer.json()["deployments"]}
