"""Drive the compose master's web UI like a user (scripts/compose_check.sh --web): a headless Chromium
opens the UI, presses Start, opens the LLM tab and waits for live step numbers, then waits for the run
directory to be finished (summary.json and report.html). Exit 0 when all of that happened.

    python scripts/compose_web_check.py http://127.0.0.1:8089 RUN_DIR
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
#: the first step's label in the LLM tab's step table
FIRST_STEP = "r1.00"
#: a positive number (a rate, a latency) in a table row
POSITIVE = re.compile(r"(?<![\w.])(?:0\.\d*[1-9]|[1-9]\d*(?:\.\d+)?)(?![\w.])")


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"compose_web_check: {url} did not answer within {timeout_s:.0f} s")


def main() -> int:
    base, run_dir = sys.argv[1].rstrip("/"), Path(sys.argv[2])
    wait_http(base + "/", 180)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(base + "/", wait_until="load")
            page.get_by_role("button", name="Start").click()
            print("compose_web_check: pressed Start")
            page.get_by_role("tab", name="LLM").click()
            deadline = time.monotonic() + 120
            row = ""
            while time.monotonic() < deadline:
                rows = page.get_by_role("row").filter(has_text=FIRST_STEP)
                row = rows.first.inner_text() if rows.count() else ""
                if POSITIVE.search(row.replace(FIRST_STEP, "", 1)):
                    break
                time.sleep(1)
            else:
                raise SystemExit(f"compose_web_check: no live numbers for {FIRST_STEP} in the LLM tab: {row!r}")
            print("compose_web_check: live numbers in the LLM tab:", " ".join(row.split()))
        finally:
            browser.close()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if (run_dir / "summary.json").is_file() and (run_dir / "report.html").is_file():
            print(f"compose_web_check: run directory finished: {run_dir}")
            return 0
        time.sleep(1)
    print(f"compose_web_check: {run_dir} has no summary.json and report.html after the run", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
