"""The console's browser tests: a real `bentoml serve` of the tiny models plus the console's demo models
(scripts/console_screenshots.py: pose, a text model whose labels are markup, a forecaster candidate), and the
system Chromium driven by Playwright (no browser download). Outside CI a missing browser or Playwright skips with
the reason; in CI (.ci/run installs the Debian package chromium, CI=true) it fails."""
from __future__ import annotations

import os

import pytest

from scripts.console_screenshots import ADMIN_KEY, demo_server
from scripts.imagetools import StepFailed


def _browser_or_reason() -> tuple[str | None, str]:
    try:
        import playwright.sync_api  # noqa: F401 - only whether it is there
    except ImportError:
        return None, "Playwright is not installed (the dev extra: make install)"
    from scripts.console_screenshots import chromium

    try:
        return chromium(), ""
    except StepFailed as exc:
        return None, str(exc)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path, reason = _browser_or_reason()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI: {reason}")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def console_server(chromium_path, tiny_registry, tmp_path_factory):
    root = tmp_path_factory.mktemp("console")
    with demo_server(root, tiny_registry.root, log_path=root / "serve.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        yield browser
        browser.close()


class Tab:
    """A page of a fresh browser context on the server, with every console error and page error collected."""

    def __init__(self, browser, url: str, width: int = 1280, height: int = 800, admin: bool = False):
        self.context = browser.new_context(base_url=url, viewport={"width": width, "height": height})
        if admin:
            self.context.add_init_script(f"sessionStorage.setItem('triserve.adminKey', '{ADMIN_KEY}')")
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.dialogs: list[str] = []

        def accept(dialog):
            self.dialogs.append(dialog.message)
            dialog.accept()

        self.page.on("dialog", accept)


@pytest.fixture
def tab(browser, console_server):
    """tab() -> a Tab (closed after the test); keyword arguments: width, height, admin."""
    opened: list[Tab] = []

    def open_tab(**kwargs) -> Tab:
        opened.append(Tab(browser, console_server.url, **kwargs))
        return opened[-1]

    yield open_tab
    for t in opened:
        t.context.close()
