"""Headless Chromium for tests that check what a person sees (Debian's `chromium`, driven by Playwright).

Tests that need it skip with the reason when the browser or Playwright is missing; `.ci/run`
installs both, so in CI they run.
"""

from __future__ import annotations

import shutil

import pytest

BROWSER_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def system_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    executable = system_chromium()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=BROWSER_FLAGS)
        yield launched
        launched.close()


DECODE_ALL = """seconds => Promise.race([
  Promise.all(Array.from(document.images).map(image => { image.loading = "eager"; return image.decode(); })),
  new Promise((_, reject) => setTimeout(() => reject(new Error(`not decoded in ${seconds} s`)), seconds * 1000)),
])"""


def decode_all_images(page, seconds: float = 30.0) -> None:
    """Wait until every image of the page has decoded (lazy ones are loaded now: a lazy image far
    below the window would otherwise never decode); a decoding error or the time running out fails."""
    page.evaluate(DECODE_ALL, seconds)
