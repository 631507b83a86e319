"""A real browser for UI tests: Debian's chromium through Playwright (no browser download), kept off the
network, and screenshots under test-artifacts/ (SPECWATCH_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specwatch_testing.server import REPO

ARTIFACTS = Path(os.environ.get("SPECWATCH_TEST_ARTIFACTS", REPO / "test-artifacts"))
# The flags keep it off the (closed) network.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
