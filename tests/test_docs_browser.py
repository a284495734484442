"""The docs site in headless Chromium: opened from disk (site/index.html as a file) its nav links
open pages, not directory listings; served as `make docs-serve` serves it (127.0.0.1), search
finds pages. The browser helpers are the report's (tests/test_report_browser.py); the site is
built in the test's own directory, never in the repository."""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from tests.conftest import REPO
from tests.test_report_browser import FLAGS, browser_paths


def _wait(check, seconds: float = 15.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    return check()


def test_the_docs_site_works_from_disk_and_searches_when_served(tmp_path):
    chromium, chromedriver = browser_paths()
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options.add_argument(f"--user-data-dir={profile}")
    drv = webdriver.Chrome(service=Service(chromedriver), options=options)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # From disk: a nav link names a page file and opens the page.
        index = (site / "index.html").as_uri()
        drv.get(index)
        link = next(a for a in drv.find_elements(By.CSS_SELECTOR, "nav.md-nav a.md-nav__link[href]")
                    if "running" in (a.get_attribute("href") or ""))
        assert (link.get_attribute("href") or "").endswith("running.html")  # not a directory the browser lists
        drv.execute_script("arguments[0].click();", link)
        assert _wait(lambda: drv.current_url != index)
        assert drv.current_url.endswith("running.html") and drv.current_url.startswith("file://")
        assert "Index of" not in drv.title and drv.find_element(By.CSS_SELECTOR, "article h1").text.strip()

        # Served on 127.0.0.1 (make docs-serve): search finds pages.
        drv.get(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        drv.execute_script("document.querySelector('label[for=__search]').click();")
        box = _wait(lambda: next((b for b in drv.find_elements(By.CSS_SELECTOR, "input.md-search__input")
                                  if b.is_displayed()), None))
        assert box is not None, "the search box is hidden"
        box.send_keys("fingerprint")
        assert _wait(lambda: drv.find_elements(By.CSS_SELECTOR, ".md-search-result__item")), "search found nothing"
    finally:
        drv.quit()
        server.shutdown()
        server.server_close()
        shutil.rmtree(profile, ignore_errors=True)
    # The docs say how to get search: serve the site.
    development = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    assert "make docs-serve" in development and "127.0.0.1" in development
