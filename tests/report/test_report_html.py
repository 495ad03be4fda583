"""``perfledger report --html``: a self-contained page, opened in headless Chromium.

The browser test needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them)
and selenium (dev extra); it is skipped with the reason when any is missing. It takes a
screenshot, reads the browser's console log (no errors allowed), and checks that every plot
image decoded to a non-empty bitmap.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rm_session import scripted_ledger

#: Every test reads one scripted ledger built through the CLI (seconds): left to `make test`.
pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted session's report, written through the CLI."""
    tmp = tmp_path_factory.mktemp("report")
    ledger = scripted_ledger(tmp / "ledger")
    out = tmp / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", str(ledger), "report", "--html", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 plots" in done.stdout
    return out


def test_report_is_self_contained(report: Path) -> None:
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>")
    # no network: nothing is fetched (no src/href to a URL, no script, no external CSS/fonts)
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert "<script" not in page and "@import" not in page and "url(" not in page
    images = re.findall(r'<img class="plot" alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    for needed in ("t1: decode wall time", "primary achieved", "Claims vs outcomes",
                   "Timeline of decisions", "ChampionSelected", "closes <b>implementation</b>"):  # fmt: skip
        assert needed in page, needed


@pytest.fixture
def browser() -> Iterator[object]:
    """A headless Chromium driven by selenium with a fresh profile; skips when unavailable."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"chromium ({CHROMIUM}) or chromedriver ({CHROMEDRIVER}) is not installed: "
                    "apt-get install chromium chromium-driver")  # fmt: skip
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="perfledger-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                 "--window-size=1400,2400"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_report_in_headless_chromium(report: Path, browser: object, tmp_path: Path) -> None:
    driver = browser
    driver.get(report.as_uri())  # type: ignore[attr-defined]
    assert "perfledger report" in driver.title  # type: ignore[attr-defined]
    shot = tmp_path / "report.png"
    assert driver.save_screenshot(str(shot))  # type: ignore[attr-defined]
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
    errors = [entry for entry in driver.get_log("browser")  # type: ignore[attr-defined]
              if entry["level"] in ("SEVERE", "ERROR")]  # fmt: skip
    assert errors == []
    sizes = driver.execute_script(  # type: ignore[attr-defined]
        "return Array.from(document.querySelectorAll('img.plot')).map("
        "i => [i.complete, i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width])"
    )
    assert len(sizes) == 3
    for complete, width, height, shown in sizes:
        assert complete and width > 100 and height > 100 and shown > 0
    # a plot is not blank: its pixels are not all one colour
    blank = driver.execute_script(  # type: ignore[attr-defined]
        "const i=document.querySelector('img.plot');const c=document.createElement('canvas');"
        "c.width=i.naturalWidth;c.height=i.naturalHeight;const x=c.getContext('2d');"
        "x.drawImage(i,0,0);const d=x.getImageData(0,0,c.width,c.height).data;"
        "const s=new Set();for(let k=0;k<d.length;k+=4*97){s.add(d[k]*65536+d[k+1]*256+d[k+2])}"
        "return s.size"
    )
    assert blank > 5
    shutil.copy(shot, report.with_suffix(".png"))
