"""Hostile input to the compatibility page (issue 34, round four).

Every untrusted string that reaches the page (bench result file names and their fields, the smoke history, smoke
reports, arch-coverage documents, build and publish reports, signing records) is written with markup in it; the
page is parsed (html.parser: no lxml here) and must hold no event-handler attribute, no element that runs or
loads something and no script other than the page's own two. A crafted smoke history or bench document is skipped
entry by entry with one warning line, the page still made; a FIFO at an input path is refused, never waited on.
The arm64 row takes the arch coverage the build wrote for its own image (records shaped by the build's writer).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

from imagebuild.prove.coverage import judge
from imagebuild.report.html import render
from imagebuild.report.model import NOT_RUN
from tests.test_report import (
    LOCAL_ID,
    NOW,
    REPO,
    _write,
    cpu_evidence,
    failed,
    page_for,
    real_cpu_report,
    rocm_evidence,
    row,
)
from tests.test_report_browser import browser, type_query  # noqa: F401 (the chromium harness's fixture)

PWNED = "window.__pwned=1;0"  # the statement ends before what the page appends ("-title")
PAYLOADS = [
    f'" onload="{PWNED}',
    f"' onmouseover='{PWNED}",
    f"<svg onload={PWNED}>",
    f"<img src=x onerror={PWNED}>",
    f"javascript:{PWNED}",
    f"]]><script>{PWNED}</script>",
    f"</script><script>{PWNED}</script>",
    "<!--<script>",
    "$\\frac{$",
]
HISTORY = "build/report/smoke-history.json"
SCAN = {"libraries": [], "requested": [], "scan": {"files_seen": 2315, "files_read": 0, "seconds": 0.5}}


class Collected(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def parsed(html: str) -> Collected:
    out = Collected()
    out.feed(html)
    out.close()
    return out


def assert_nothing_runs(html: str, benign: str) -> None:
    """No event handler, no element that runs or loads, no link out, only the page's own two scripts."""
    page, ours = parsed(html), parsed(benign)
    for tag, attrs in page.tags:
        assert tag not in {"img", "iframe", "object", "embed", "foreignobject", "handler", "base", "meta"} or (
            tag == "meta" and set(attrs) <= {"charset", "name", "content"}
        ), (tag, attrs)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            assert name not in {"src", "formaction", "srcdoc"}, (tag, name, value)
            if name.endswith("href"):
                assert (value or "").startswith("#"), (tag, name, value)
            assert "javascript:" not in (value or "").lower() or name in {"title", "data-row", "data-arch"}, (tag, name)
    assert [t for t, _ in page.tags].count("script") == 2
    assert page.scripts[1] == ours.scripts[1]  # the page's own code, as in a page of benign evidence
    assert "<" not in page.scripts[0] and ">" not in page.scripts[0]
    json.loads(page.scripts[0])


def hostile_evidence(root: Path, payload: str) -> Path:
    """The payload in every field of every document the page reads; returns the bench folder."""
    cpu_evidence(root, published=True)
    rocm_evidence(root)
    report = json.loads((root / "build/build-report.json").read_text())
    for entry in report["targets"]:
        entry["tags"] = [payload, *entry["tags"]]
        entry["created"] = payload
    report["targets"][0]["coverage"] = payload  # "why not scanned"
    report["targets"][1]["coverage"] = f"build/coverage/{payload.replace('/', '|')}.json"
    _write(root / "build/build-report.json", report)
    (root / "build/coverage").mkdir(parents=True, exist_ok=True)
    doc = real_cpu_report(LOCAL_ID)
    doc["gpu_name"] = payload
    doc = failed(doc, "runtime", payload)
    _write(root / "build/smoke/local-cpu/report.json", doc)
    rocm = json.loads((root / "build/smoke/rocm6.1-torch2.3/report.json").read_text())
    rocm["gpu_name"] = payload
    rocm["checks"][1].update(status="failed", reason=payload)
    rocm["passed"] = False
    _write(root / "build/smoke/rocm6.1-torch2.3/report.json", rocm)
    cov = json.loads((root / "build/coverage/rocm6.1-torch2.3.json").read_text())
    for lib in cov["libraries"]:
        lib["owner"], lib["path"] = f"python:{payload}", f"/x/{payload}"
    cov["gaps"][0]["why"] = payload
    _write(root / "build/coverage/rocm6.1-torch2.3.json", cov)
    pub = root / "build/publish/local-cpu/linux-amd64/publish-report.json"
    doc = json.loads(pub.read_text())
    doc.update(repository=payload, refs=[payload], created=payload)
    _write(pub, doc)
    _write(pub.with_name("signing.json"), {"signed_by": payload, "attached": ["signature", f"smoke {payload}"]})
    index = json.loads((root / "build/publish/local-cpu/publish-report.json").read_text())
    index.update(digest=payload, refs=[payload])
    index["platforms"]["linux/amd64"] = doc["digest"]
    _write(root / "build/publish/local-cpu/publish-report.json", index)
    point = {
        "series": payload,
        "image_id": payload,
        "when": "2026-11-30T10:00:00+00:00",
        "passed": True,
        "tokens_per_s": 150.0,
        "server_start_s": 4.0,
        "ttft_s": 0.02,
        "report_sha256": "0" * 64,
    }
    _write(root / HISTORY, {"schema_version": 1, "points": [point]})
    bench = root / "bench"
    rows = [{"sources": [f"{payload}.{fam}"], "M": m, "speedup_vs_cublas": 1.1} for fam in ("qkv", "o") for m in (1, 4)]
    _write(bench / f"{payload.replace('/', '|')}.json", {"gpu": payload, "command": payload, "skinny_linear": rows})
    return bench


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_untrusted_string_becomes_markup(tmp_path: Path, payload: str) -> None:
    benign_root = tmp_path / "benign"
    benign = render(page_for(benign_root))
    root = tmp_path / "hostile"
    bench = hostile_evidence(root, payload)
    page = page_for(root, bench_dir=bench)
    html = render(page)
    assert_nothing_runs(html, benign)
    assert [p.id.split("-")[1] for p in page.plots] == ["runtime", "kernels"]  # both drawn, both inlined
    assert page.plots[1].id.replace("-", "").replace("_", "").isalnum()  # an id is one word of aria-labelledby
    assert payload.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in html  # shown, as text


def test_a_file_name_that_is_markup_is_not_an_attribute(tmp_path: Path) -> None:
    """The round-four case: a bench result's file name ended the SVG's aria-labelledby and added onload."""
    bench = tmp_path / "bench"
    rows = [{"sources": ["m.qkv"], "M": 1, "speedup_vs_cublas": 1.2}]
    _write(bench / f'x" onload="{PWNED}" y=".json', {"gpu": "G", "skinny_linear": rows})
    page = page_for(tmp_path, bench_dir=bench)
    (plot,) = page.plots
    svg = parsed(plot.svg)
    assert svg.tags[0][0] == "svg" and not any(k.startswith("on") for k in svg.tags[0][1])
    labelled = svg.tags[0][1]["aria-labelledby"] or ""
    assert " " not in labelled and [a.get("id") for _, a in svg.tags if a.get("id") == labelled] == [labelled]


def test_unsafe_svg_is_refused() -> None:
    from imagebuild.report.escape import UnsafeSvg, checked_svg, script_json

    ok = (
        '<svg xmlns="http://www.w3.org/2000/svg"><g clip-path="url(#p1)"><use xlink:href="#m" '
        'xmlns:xlink="http://www.w3.org/1999/xlink"/></g></svg>'
    )
    assert checked_svg(ok) == ok
    for bad in (
        '<svg xmlns="http://www.w3.org/2000/svg" onload="x()"/>',
        '<svg xmlns="http://www.w3.org/2000/svg"><script>x()</script></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><foreignObject/></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><a href="javascript:x()"/></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><g style="fill:url(https://e.example/x)"/></svg>',
        '<!DOCTYPE svg [<!ENTITY e "x">]><svg xmlns="http://www.w3.org/2000/svg">&e;</svg>',
        "<svg",
    ):
        with pytest.raises(UnsafeSvg):
            checked_svg(bad)
    assert script_json({"a": "</script><!--"}) == '{"a":"\\u003c/script\\u003e\\u003c!--"}'
    assert json.loads(script_json({"a": "</script><!--&"})) == {"a": "</script><!--&"}


GOOD_POINT = {
    "series": "local-cpu linux/amd64 cpu",
    "image_id": LOCAL_ID,
    "when": "2026-11-30T10:00:00+00:00",
    "passed": True,
    "tokens_per_s": 150.0,
    "server_start_s": 4.0,
    "ttft_s": 0.02,
    "report_sha256": "1" * 64,
}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"when": "2026-11-30T10:00:00"}, "when: Value error, a time without a zone"),
        ({"when": 1764496800}, "when: Input should be a valid string"),
        ({"when": "yesterday"}, "when: Value error, not an ISO 8601 time"),
        ({"tokens_per_s": "150"}, "tokens_per_s: Input should be a valid number"),
        ({"tokens_per_s": float("nan")}, "tokens_per_s: Value error, must be a finite number, 0 or more"),
        ({"server_start_s": -1.0}, "server_start_s: Value error, must be a finite number, 0 or more"),
        ({"passed": "yes"}, "passed: Input should be a valid boolean"),
        ({"series": "a\x1b]0;x\x07"}, "series: not in the form expected"),
        ({"report_sha256": "x"}, "report_sha256: not in the form expected"),
        ({"extra\x1b[31m": 1}, "extra?[31m: Extra inputs are not permitted"),
    ],
)
def test_a_bad_history_point_is_skipped_with_one_warning(tmp_path: Path, change: dict, said: str) -> None:
    cpu_evidence(tmp_path)
    bad = {**GOOD_POINT, **change}
    _write(tmp_path / HISTORY, {"schema_version": 1, "points": [GOOD_POINT, bad]})
    before = json.loads((tmp_path / HISTORY).read_text())["points"][1]
    page = page_for(tmp_path)
    lines = [w for w in page.warnings if "smoke-history.json" in w]
    assert lines == [f"{HISTORY}: 1 of 2 points skipped (kept in the file as they are): points[1] ({said})"], lines
    plot = next(p for p in page.plots if p.id == "plot-runtime")
    assert len(plot.table) == 1 + 1 + 2  # the good point and this run's two reports
    kept = json.loads((tmp_path / HISTORY).read_text())["points"]
    assert len(kept) == 4 and kept[-1] == before  # the skipped point is written back as it was


def test_mathtext_in_a_series_name_is_drawn_as_text(tmp_path: Path) -> None:
    names = ["$\\frac{$", "$x^{$", "\\$$\\undefinedcommand$", "$" * 50]
    points = [{**GOOD_POINT, "series": n, "report_sha256": f"{i:064x}"} for i, n in enumerate(names)]
    _write(tmp_path / HISTORY, {"schema_version": 1, "points": points})
    page = page_for(tmp_path)
    plot = next(p for p in page.plots if p.id == "plot-runtime")
    assert sorted(r[0] for r in plot.table[1:]) == sorted(names)
    assert "\\frac{" in plot.svg and not [w for w in page.warnings if "history" in w]


def test_history_that_is_no_history_is_left_as_it_is(tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    (tmp_path / HISTORY).parent.mkdir(parents=True)
    for text in ('[{"series": 1}]', '{"schema_version": 2, "points": []}', "[" * 100_000, "1" * 10_000):
        (tmp_path / HISTORY).write_text(text)
        page = page_for(tmp_path)
        assert (tmp_path / HISTORY).read_text() == text
        assert len([w for w in page.warnings if HISTORY in w]) == 1, page.warnings
        assert row(page, "local-cpu").verdict == "passed"


def test_bad_bench_entries_are_skipped_with_one_warning(tmp_path: Path) -> None:
    good = {"sources": ["m.qkv"], "M": 1, "speedup_vs_cublas": 1.2}
    entries = [
        good,
        {**good, "M": "1"},
        {**good, "speedup_vs_cublas": "fast"},
        {**good, "speedup_vs_cublas": float("inf")},
        {**good, "sources": "m.qkv"},
        "row",
    ]
    _write(tmp_path / "bench/k.json", {"gpu": "G", "skinny_linear": entries})
    _write(tmp_path / "bench/gpu.json", {"gpu": 7, "skinny_linear": [good]})
    page = page_for(tmp_path, bench_dir=tmp_path / "bench")
    assert [p.id for p in page.plots] == ["plot-kernels-k"]
    lines = [w for w in page.warnings if w.startswith("bench/")]
    assert len(lines) == 2, lines
    assert lines[0] == "bench/gpu.json: not a kernel benchmark document: gpu: Input should be a valid string"
    assert lines[1].startswith("bench/k.json: 5 of 6 entries skipped: skinny_linear[1] (M: Input should be a valid")
    assert lines[1].endswith(", and 2 more")


def test_cli_makes_the_page_from_a_crafted_history(tmp_path: Path, cli) -> None:
    shutil.copy(REPO / "matrix.yaml", tmp_path / "matrix.yaml")
    cpu_evidence(tmp_path)
    bad = [
        {**GOOD_POINT, "series": "$\\frac{$"},
        {**GOOD_POINT, "when": "2026-11-30T10:00:00"},
        {**GOOD_POINT, "when": 5},
        {**GOOD_POINT, "tokens_per_s": "fast"},
    ]
    _write(tmp_path / HISTORY, {"schema_version": 1, "points": bad})
    result = cli("--matrix", str(tmp_path / "matrix.yaml"), "report", "--no-engine", "--bench", str(tmp_path / "n"))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    lines = [line for line in result.stderr.splitlines() if "smoke-history.json" in line]
    assert lines == [
        f"warning: {HISTORY}: 3 of 4 points skipped (kept in the file as they are): "
        "points[1] (when: Value error, a time without a zone); points[2] (when: Input should be a valid string); "
        "points[3] (tokens_per_s: Input should be a valid number)"
    ]
    assert (tmp_path / "build/report/compat.html").is_file()


def _in_time(fn, seconds: float = 30.0):
    """fn() in a thread; fails (rather than hangs the suite) when it has not returned in `seconds`."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still reading after {seconds} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


@pytest.mark.parametrize(
    "where",
    [
        HISTORY,
        "build/build-report.json",
        "build/smoke/local-cpu/report.json",
        "build/smoke/local-cpu/linux-arm64/report.json",
        "build/coverage/local-cpu.json",
        "build/publish/local-cpu/publish-report.json",
        "bench/k.json",
    ],
)
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_at_an_input_path_is_refused(tmp_path: Path, where: str, kind: str) -> None:
    cpu_evidence(tmp_path)
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    page = _in_time(lambda: page_for(tmp_path, bench_dir=tmp_path / "bench"))
    words = "a FIFO" if kind == "fifo" else "a character device"
    assert [w for w in page.warnings if w.startswith(f"{where}: not read: is {words}")], page.warnings
    assert path.is_fifo() if kind == "fifo" else path.is_symlink()  # refused, not replaced
    assert "<html" in render(page)


def test_coverage_path_outside_the_checkout_is_not_read(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "elsewhere.json"
    cpu_evidence(root)
    _write(outside, judge(SCAN, {}, "local-cpu").to_dict())
    report = json.loads((root / "build/build-report.json").read_text())
    report["targets"][0]["coverage"] = str(outside)
    report["targets"][1]["coverage"] = "../elsewhere.json"
    _write(root / "build/build-report.json", report)
    page = page_for(root)
    assert row(page, "local-cpu").coverage.status == NOT_RUN
    assert row(page, "local-cpu", "linux/arm64").coverage.status == NOT_RUN
    assert len([w for w in page.warnings if "is not in the checkout: not read" in w]) == 2


def quickstart_coverage(root: Path) -> None:
    """The records the quick start's build leaves: each platform's image scanned and judged by the build's own
    writer (prove.coverage.judge, target = the build record's name), the path the build report names absolute."""
    report = json.loads((root / "build/build-report.json").read_text())
    for entry in report["targets"]:
        path = (root / "build/coverage" / f"{entry['target']}.json").resolve()
        _write(path, judge(SCAN, {}, entry["target"]).to_dict())
        entry["coverage"] = str(path)
    _write(root / "build/build-report.json", report)


def test_arm64_row_takes_the_coverage_of_its_own_image(tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    quickstart_coverage(tmp_path)
    page = page_for(tmp_path)
    for oci in ("linux/amd64", "linux/arm64"):
        r = row(page, "local-cpu", oci)
        assert r.coverage.status == "ok: no GPU code to cover", (oci, r.coverage)
    assert row(page, "local-cpu", "linux/arm64").coverage.document == "build/coverage/local-cpu-linux-arm64.json"
    assert not [w for w in page.warnings if "coverage" in w], page.warnings


def test_coverage_of_another_image_is_not_used(tmp_path: Path) -> None:
    cpu_evidence(tmp_path)
    quickstart_coverage(tmp_path)
    arm = tmp_path / "build/coverage/local-cpu-linux-arm64.json"
    shutil.copy(tmp_path / "build/coverage/local-cpu.json", arm)  # the amd64 image's document
    page = page_for(tmp_path)
    assert row(page, "local-cpu", "linux/arm64").coverage.status == NOT_RUN
    assert row(page, "local-cpu").coverage.status == "ok: no GPU code to cover"
    assert page.warnings == [
        "build/coverage/local-cpu-linux-arm64.json: is for image local-cpu, not local-cpu-linux-arm64: not used"
    ]


def test_history_times_are_kept_in_utc(tmp_path: Path) -> None:
    _write(tmp_path / HISTORY, {"schema_version": 1, "points": [{**GOOD_POINT, "when": "2026-11-30T12:00:00+02:00"}]})
    page = page_for(tmp_path)
    plot = next(p for p in page.plots if p.id == "plot-runtime")
    assert plot.table[1][1] == "2026-11-30T10:00:00+00:00"
    assert NOW.tzinfo is not None


@pytest.mark.skipif(
    not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()),
    reason="chromium / chromium-driver not installed",
)
def test_injected_handlers_do_not_run_in_chromium(browser, tmp_path: Path) -> None:  # noqa: F811
    """Every payload on one page each, opened in headless Chromium (tests/test_report_browser.py's harness): no
    handler ran, no element carries one, the page's own script still works (the lookup answers)."""
    from selenium.webdriver.common.by import By

    from imagebuild.report.html import write

    driver = browser
    for i, payload in enumerate(PAYLOADS):
        root = tmp_path / str(i)
        bench = hostile_evidence(root, payload)
        page = page_for(root, bench_dir=bench)
        html, _ = write(page, root / "out")
        driver.get(html.as_uri())
        found = driver.execute_script(
            """
                var handlers = 0;
                document.querySelectorAll('*').forEach(function (e) {
                  Array.prototype.forEach.call(e.attributes, function (a) {
                    if (a.name.toLowerCase().indexOf('on') === 0) { handlers += 1; } });
                  ['mouseover', 'focus', 'click', 'load', 'error'].forEach(function (t) {
                    if (e.tagName !== 'BUTTON' && e.tagName !== 'A' && e.tagName !== 'SUMMARY') {
                      e.dispatchEvent(new Event(t)); } });
                });
                return {pwned: window.__pwned === 1, handlers: handlers,
                        scripts: document.scripts.length, plots: document.querySelectorAll('svg.plot').length};
                """
        )
        assert found == {"pwned": False, "handlers": 0, "scripts": 2, "plots": 2}, (payload, found)
        runs = sum(1 for r in page.rows if page.lookup["verdicts"]["gfx942"][r.id][0])
        said = type_query(driver, "gfx942")  # the page's own script still works
        assert f"{runs} of {len(page.rows)} rows run there" in said and runs, payload
        assert driver.find_element(By.ID, "lookup-result").text


@pytest.mark.parametrize("requested", [[PAYLOADS[0]], ["gfx942:xnack+:xnack-"], ["x" * 100_000]])
def test_coverage_arches_that_are_no_target_ids_are_not_rows(tmp_path: Path, requested: list[str]) -> None:
    rocm_evidence(tmp_path)
    path = tmp_path / "build/coverage/rocm6.1-torch2.3.json"
    doc = json.loads(path.read_text())
    doc["requested"] = requested
    _write(path, doc)
    page = page_for(tmp_path)
    assert [r.arch for r in page.rows if r.target == "rocm6.1-torch2.3"] == ["gfx90a", "gfx942"]  # the matrix's
    assert all(r.coverage.status == NOT_RUN for r in page.rows if r.target == "rocm6.1-torch2.3")
    (line,) = [w for w in page.warnings if "requested arches" in w]
    assert line.startswith("build/coverage/rocm6.1-torch2.3.json: requested arches are not GPU target IDs (")
    assert line.endswith(": not used") and len(line) < 300


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_as_the_matrix_is_refused(tmp_path: Path, kind: str, cli) -> None:
    matrix = tmp_path / "matrix.yaml"
    if kind == "fifo":
        os.mkfifo(matrix)
    else:
        matrix.symlink_to("/dev/zero")
    result = _in_time(lambda: cli("--matrix", str(matrix), "report", "--no-engine", "--out", str(tmp_path / "o")))
    words = "a FIFO" if kind == "fifo" else "a character device"
    assert (
        result.exit_code == 2
        and result.stderr == f"error: {matrix}: cannot read the matrix: is {words}, not a regular file\n"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("where", "field", "value", "said"),
    [
        ("build/build-report.json", ("targets", 0, "tags"), 5, "build/build-report.json: targets[0] not used: tags:"),
        ("build/build-report.json", ("targets",), {"a": 1}, "build/build-report.json: not a build report: targets:"),
        ("build/publish/local-cpu/publish-report.json", ("refs",), 5, "not a publish report: refs:"),
        ("build/publish/local-cpu/publish-report.json", ("platforms",), [1], "not a publish report: platforms:"),
        ("build/publish/local-cpu/linux-amd64/publish-report.json", ("refs",), 5, "not a publish report: refs:"),
        ("build/publish/local-cpu/linux-amd64/signing.json", ("attached",), 5, "not a signing record: attached:"),
        ("build/publish/local-cpu/linux-amd64/signing.json", ("signed_by",), ["x"], "not a signing record: signed_by:"),
    ],
)
def test_a_record_of_the_wrong_shape_is_not_used(tmp_path: Path, where: str, field: tuple, value, said: str) -> None:
    """Found by replacing each field of each record with another type (5, [1], {"a": 1}): these were tracebacks."""
    cpu_evidence(tmp_path, published=True)
    doc = json.loads((tmp_path / where).read_text())
    here = doc
    for step in field[:-1]:
        here = here[step]
    here[field[-1]] = value
    _write(tmp_path / where, doc)
    page = page_for(tmp_path)
    assert [w for w in page.warnings if said in w], page.warnings
    assert "<html" in render(page)
