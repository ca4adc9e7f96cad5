"""The compatibility page in a real browser: Debian's chromium driven by its chromium-driver through selenium.

selenium (the WebDriver project's own Python binding) because typing into the lookup needs a driver; it is
pointed at /usr/bin/chromedriver, so Selenium Manager never looks for (or downloads) one. scripts/setup.sh installs
chromium, chromium-driver and selenium. The screenshot of a page built from fixed evidence is compared with
tests/golden/compat-page.png, tolerantly (small rendering differences pass, a moved or missing block fails);
IMAGEBUILD_UPDATE_GOLDEN=1 writes the golden file instead.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.test_report import NOW, REPO, cpu_evidence, page_for, rocm_evidence

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
GOLDEN = REPO / "tests/golden/compat-page.png"
# the page's rows: every default arch of every target on every OCI platform (cuda13.0-torch2.14 brought 8 of them,
# SGLang 8 more, the five ROCm 7.14 families 7)
ROWS = 29
WIDTH = 1280

pytestmark = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(DRIVER).exists()), reason="chromium / chromium-driver not installed"
)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--window-size={WIDTH},1000", "--force-device-scale-factor=1", "--lang=en-US"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def write_page(root: Path, **kwargs) -> Path:
    from imagebuild.report.html import write

    html, _ = write(page_for(root, **kwargs), root / "out")
    return html


def visible_rows(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [
        tr.get_attribute("data-row")
        for tr in driver.find_elements(By.CSS_SELECTOR, "#rows tbody tr")
        if tr.is_displayed()
    ]


def badges(driver) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    return {
        tr.get_attribute("data-row"): tr.find_element(By.CSS_SELECTOR, ".badge").text
        for tr in driver.find_elements(By.CSS_SELECTOR, "#rows tbody tr")
    }


def type_query(driver, text: str) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.ID, "gpu-query")
    box.clear()
    box.send_keys(text, Keys.ENTER)
    return driver.find_element(By.ID, "lookup-result").text


def test_lookup_shows_the_rows_that_run_there(browser, tmp_path: Path) -> None:
    rocm_evidence(tmp_path)
    browser.get(write_page(tmp_path).as_uri())
    assert len(visible_rows(browser)) == ROWS
    said = type_query(browser, "gfx942")
    mi300 = ["rocm6.1-torch2.3|linux/amd64|gfx942", "rocm7.14-gfx942-torch2.12|linux/amd64|gfx942"]
    assert visible_rows(browser) == mi300
    assert f"2 of {ROWS} rows run there" in said
    type_query(browser, "MI300X")
    assert visible_rows(browser) == mi300
    hopper = [
        "cuda12.1-torch2.3|linux/amd64|sm_90",
        "cuda13.0-torch2.14|linux/amd64|sm_90",
        "cuda13.0-torch2.14|linux/arm64|sm_90",  # GH200
        "cuda13.0-torch2.14.1-sglang|linux/amd64|sm_90",
        "cuda13.0-torch2.14.1-sglang|linux/arm64|sm_90",
    ]
    type_query(browser, "H100")
    assert visible_rows(browser) == hopper
    type_query(browser, "sm_90")
    assert visible_rows(browser) == hopper
    said = type_query(browser, "gfx1100")
    rdna3 = ["rocm7.14-gfx110x-torch2.12|linux/amd64|gfx1100"]  # only the RDNA3 family's image (issue 32)
    assert visible_rows(browser) == rdna3 and f"1 of {ROWS} rows run there" in said
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, "#lookup-result summary").click()
    why = browser.find_element(By.ID, "lookup-result").text
    assert "no code for gfx1100 in this image (it has gfx90a, gfx942)" in why
    said = type_query(browser, "tpu")
    assert "No GPU known" in said and len(visible_rows(browser)) == ROWS
    browser.find_element(By.ID, "lookup-clear").click()
    assert len(visible_rows(browser)) == ROWS


def test_failed_smoke_shows_failed(browser, tmp_path: Path) -> None:
    cpu_evidence(tmp_path, amd64_failed=True)
    browser.get(write_page(tmp_path).as_uri())
    shown = badges(browser)
    assert shown["local-cpu|linux/amd64|cpu"] == "failed"
    assert shown["local-cpu|linux/arm64|cpu"] == "passed"
    assert (
        "runtime: server exited 1"
        in browser.find_element("css selector", '[data-row="local-cpu|linux/amd64|cpu"]').text
    )


def test_no_evidence_shows_not_run(browser, tmp_path: Path) -> None:
    browser.get(write_page(tmp_path).as_uri())
    assert set(badges(browser).values()) == {"not run"}
    assert "passed" not in set(badges(browser).values())


def test_page_is_offline_and_accessible(browser, tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    browser.get(write_page(tmp_path, bench_dir=REPO / "bench/results").as_uri())
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
    facts = browser.execute_script(
        """
        function lum(c) { var v = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map(function (x) {
          x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
          return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; }
        function bg(e) { while (e) { var b = getComputedStyle(e).backgroundColor;
          if (b !== 'rgba(0, 0, 0, 0)' && b !== 'transparent') { return b; } e = e.parentElement; }
          return 'rgb(255,255,255)'; }
        var worst = 99;
        document.querySelectorAll('.badge, td, th, .muted, button, label, figcaption').forEach(function (e) {
          if (!e.offsetParent) { return; }
          var a = lum(getComputedStyle(e).color), b = lum(bg(e));
          worst = Math.min(worst, (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)); });
        return {
          worst: worst,
          label: !!document.querySelector('label[for="gpu-query"]'),
          colHeaders: document.querySelectorAll('#rows thead th[scope="col"]').length,
          rowHeaders: document.querySelectorAll('#rows tbody th[scope="row"]').length,
          rows: document.querySelectorAll('#rows tbody tr').length,
          svgs: Array.prototype.map.call(document.querySelectorAll('svg.plot'), function (s) {
            var t = document.getElementById(s.getAttribute('aria-labelledby'));
            return s.getAttribute('role') === 'img' && !!t && t.textContent.length > 10; }),
          live: document.getElementById('lookup-result').getAttribute('aria-live'),
          lang: document.documentElement.lang,
        };
        """
    )
    assert facts["worst"] >= 4.5, facts  # WCAG AA for text
    assert facts["label"] and facts["live"] == "polite" and facts["lang"] == "en"
    assert facts["colHeaders"] == 10 and facts["rowHeaders"] == facts["rows"] == ROWS
    assert facts["svgs"] == [True, True]  # runtime history and kernel plot, each an image with a title


def _png(data: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def compare(actual, golden, out: Path) -> tuple[float, str]:
    """Fraction of (4x4-averaged) pixels that differ clearly; heights must agree within 3%."""
    from PIL import Image, ImageChops

    if abs(actual.height - golden.height) > 0.03 * golden.height or actual.width != golden.width:
        Image.Image.save(actual, out / "actual.png")
        return 1.0, f"size {actual.size} vs golden {golden.size}"
    h = min(actual.height, golden.height)
    a = actual.crop((0, 0, actual.width, h)).reduce(4)
    g = golden.crop((0, 0, golden.width, h)).reduce(4)
    diff = ImageChops.difference(a, g).convert("L")
    bad = sum(diff.histogram()[41:]) / (diff.width * diff.height)  # L mode: one count per level 0-255
    diff.point(lambda v: 255 if v > 40 else 0).save(out / "diff.png")
    Image.Image.save(actual, out / "actual.png")
    return bad, f"{bad:.2%} of the page differs (actual, diff: {out})"


def fixed_evidence(root: Path) -> None:
    """Evidence with fixed times: a failed amd64 smoke, a passed arm64 one, a ROCm gfx942 one, a small bench."""
    cpu_evidence(root, amd64_failed=True, published=True)
    rocm_evidence(root)
    stamp = NOW.timestamp() - 3600
    for path in (root / "build/smoke").rglob("report.json"):
        os.utime(path, (stamp, stamp))
    bench = {
        "command": "bench/kernels.py --out kernels_fixture.json",
        "gpu": "NVIDIA H200",
        "skinny_linear": [
            {"sources": [f"model.{fam}"], "M": m, "speedup_vs_cublas": 1.0 + 0.05 * i + 0.01 * m}
            for i, fam in enumerate(("qkv", "o", "gate_up", "down", "lm_head"))
            for m in (1, 4, 16)
        ],
    }
    (root / "bench").mkdir()
    (root / "bench/kernels_fixture.json").write_text(json.dumps(bench))


def test_screenshot_matches_golden(browser, tmp_path: Path) -> None:
    fixed_evidence(tmp_path)
    browser.get(write_page(tmp_path, bench_dir=tmp_path / "bench").as_uri())
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, height)
    shot = _png(browser.get_screenshot_as_png())
    if os.environ.get("IMAGEBUILD_UPDATE_GOLDEN") == "1":
        shot.save(GOLDEN, optimize=True)
        pytest.skip(f"wrote {GOLDEN}")
    assert GOLDEN.is_file(), "no golden screenshot: run with IMAGEBUILD_UPDATE_GOLDEN=1"
    from PIL import Image

    bad, said = compare(shot, Image.open(GOLDEN).convert("RGB"), tmp_path)
    if bad >= 0.02:
        shutil.copy(tmp_path / "actual.png", tmp_path / "compat-page.actual.png")
    assert bad < 0.02, said
