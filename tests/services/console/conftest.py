"""The console's browser tests: one real `bentoml serve` for all of them (package scope: every browser test module
shares it) of the tiny models plus the console's demo models (scripts/console_screenshots.py: pose, a text model
whose labels are markup, a forecaster candidate; require_key_for_inference on, an admin and an inference key), and
the system Chromium driven by Playwright (no browser download). Outside CI a missing browser or Playwright skips with
the reason; in CI (.ci/run installs the Debian package chromium, CI=true) it fails."""
from __future__ import annotations

import os

import pytest

from scripts.console_screenshots import demo_server
from scripts.imagetools import StepFailed
from tests.services.console.helpers import Tab


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


@pytest.fixture(scope="package")
def console_server(chromium_path, tiny_registry, tmp_path_factory):
    root = tmp_path_factory.mktemp("console")
    with demo_server(root, tiny_registry.root, log_path=root / "serve.log") as srv:
        yield srv


@pytest.fixture(scope="package")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def tab(browser, console_server):
    """tab() -> a Tab (helpers.py; closed after the test); keyword arguments: width, height, keys."""
    opened: list[Tab] = []

    def open_tab(**kwargs) -> Tab:
        opened.append(Tab(browser, console_server.url, **kwargs))
        return opened[-1]

    yield open_tab
    for t in opened:
        t.context.close()
