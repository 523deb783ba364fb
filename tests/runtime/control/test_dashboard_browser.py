"""``statekit ui`` in a real browser: headless Chromium (Debian's chromium + chromium-driver, which
.ci/run installs) driven by selenium, against a real job started with ``statekit run --detached``.

It opens the page without the token (refused), then with it; finds the job, its graph with
watermarks, waits until the checkpoint history shows rows, opens a checkpoint's per-subtask
details, clicks "Savepoint" and finds the savepoint's path on the page (and a complete savepoint
there), then "Stop with savepoint". Screenshots go to the test's directory and, with
``STATEKIT_UPDATE_SCREENSHOTS=1``, to docs/images/ (docs/JOBS.md shows them).

Without Chromium the test skips saying what to install — except in CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "tests" / "runtime" / "jobs" / "event_time_counts.py"
DOCS_IMAGES = ROOT / "docs" / "images"
STATEKIT = [sys.executable, "-m", "statekit.cli.main"]
WAIT_S = 60.0


def _need(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the browser test: .ci/run installs chromium and chromium-driver)")
    pytest.skip(reason)


def _chrome() -> Any:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _need(False, "selenium is not installed (the test extra has it)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (shutil.which("chromium-driver"))
    _need(binary is not None and driver is not None,
          "Chromium and its driver are not installed: apt-get install chromium chromium-driver")
    pytest.importorskip("starlette")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1400", "--no-proxy-server"):
        options.add_argument(argument)
    options.binary_location = binary
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATEKIT_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.fixture
def job(home: Path) -> Iterator[str]:
    """A running event-time job with checkpoints every 300 ms and a default savepoint directory."""
    done = subprocess.run(
        [*STATEKIT, "run", "--detached", "-p", "2", "--checkpoint-dir", str(home / "chk"), "--checkpoint-interval",
         "300ms", "--savepoint-dir", str(home / "savepoints"), str(JOB), "--rate", "300"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    try:
        yield job_id
    finally:
        subprocess.run([*STATEKIT, "cancel", job_id], capture_output=True, timeout=120)


@pytest.fixture
def ui(home: Path) -> Iterator[str]:
    """``statekit ui`` in a process of its own; yields the address it printed (with the token)."""
    process = subprocess.Popen([*STATEKIT, "ui"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:[0-9]+/\?token=\S+", line)
        assert found, (line, process.stderr.read() if process.poll() is not None else "")
        yield found.group(0)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait(driver: Any, what: str, condition: Any, timeout: float = WAIT_S) -> Any:
    """``condition(driver)`` once truthy; an element the page redrew meanwhile (stale) means: try again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
    return wait.until(condition, f"timed out waiting for {what}")


def _click(driver: Any, what: str, css: str, index: int = 0) -> None:
    """Click the ``index``-th element of ``css``, found anew until the click lands (the page
    redraws its figures every poll, so an element found a moment ago may be gone)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def clicked(d: Any) -> bool:
        try:
            found = d.find_elements(By.CSS_SELECTOR, css)
            if len(found) <= abs(index) - (1 if index < 0 else 0):
                return False
            found[index].click()
            return True
        except StaleElementReferenceException:
            return False

    _wait(driver, what, clicked)


def _shot(driver: Any, directory: Path, name: str) -> None:
    path = directory / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("STATEKIT_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGES / path.name)


def test_dashboard_in_headless_chromium(job: str, ui: str, home: Path) -> None:
    from selenium.webdriver.common.by import By

    base = ui.split("?", 1)[0]
    for path in ("", "api/jobs", f"api/jobs/{job}"):  # no token, no session: refused
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(base + path, timeout=10)
        assert refused.value.code == 401
    started = time.monotonic()
    driver = _chrome()
    timings = {"browser start": time.monotonic() - started}
    try:
        driver.get(base)
        assert "401" in driver.find_element(By.TAG_NAME, "h1").text  # the browser without the token too
        driver.get(ui)
        _wait(driver, "the job RUNNING in the overview",
              lambda d: "RUNNING" in "".join(r.text for r in d.find_elements(By.CSS_SELECTOR, f'tr[data-jid="{job}"]')))
        _shot(driver, home, "jobs")
        _click(driver, "the job's link", f'tr[data-jid="{job}"] a')

        _wait(driver, "two vertices in the graph", lambda d: len(d.find_elements(By.CSS_SELECTOR, "g.vertex")) == 2)
        _wait(driver, "the windows' input watermark",
              lambda d: re.search(r"in wm \d\d:\d\d:\d\d", d.find_element(By.ID, "graph").text))
        _click(driver, "the window vertex", "g.vertex", 1)
        _wait(driver, "the subtasks of the window vertex, with watermarks", lambda d: (lambda rows: len(rows) == 2 and all(
            re.search(r"\d\d:\d\d:\d\d", text) for text in rows))(
            [r.text for r in d.find_elements(By.CSS_SELECTOR, "#subtask-table tbody tr")]))
        _shot(driver, home, "job")

        shown = time.monotonic()
        _click(driver, "the checkpoints tab", "#tab-checkpoints")
        _wait(driver, "rows in the checkpoint history",
              lambda d: "COMPLETED" in d.find_element(By.ID, "checkpoint-history").text)
        timings["first history row"] = time.monotonic() - shown
        _click(driver, "the oldest checkpoint in the history", "#checkpoint-history tr.checkpoint-row", -1)
        _wait(driver, "a checkpoint's subtasks, two vertices at parallelism 2",
              lambda d: len(d.find_elements(By.CSS_SELECTOR, "#checkpoint-subtasks tbody tr")) == 4)
        driver.execute_script("window.scrollTo(0, 0)")
        _shot(driver, home, "checkpoints")

        clicked = time.monotonic()
        driver.find_element(By.ID, "action-savepoint").click()
        location = _wait(driver, "the savepoint's path on the page", lambda d: "".join(
            e.text for e in d.find_elements(By.CSS_SELECTOR, "#results li.ok code.location")))
        timings["savepoint click to path"] = time.monotonic() - clicked
        assert Path(location).parent == home / "savepoints" and (Path(location) / "_metadata").is_file()

        driver.find_element(By.ID, "action-stop").click()
        stopped = _wait(driver, "the stop savepoint's path", lambda d: [
            e.find_element(By.CSS_SELECTOR, "code.location").text for e in d.find_elements(By.CSS_SELECTOR, "#results li.ok")
            if e.text.startswith("stop with savepoint completed")])
        assert (Path(stopped[0]) / "_metadata").is_file()
        _wait(driver, "the job to show FINISHED", lambda d: "FINISHED" in d.find_element(By.ID, "job-state").text)
    finally:
        driver.quit()
    print("dashboard timings (s):", {k: round(v, 2) for k, v in timings.items()})
