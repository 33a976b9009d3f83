"""verify --report: one self-contained HTML page (loss curves as inline SVG, step times, device
audit, verdict); and the wording of the text report's audit. Reports are built by hand here: no
run, no torch, except the one end-to-end test through the command line."""

import math
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser

import pytest

from cpu2gpu.runtime.report.htmlreport import to_html
from cpu2gpu.runtime.report.report import to_text

from ..conftest import HANG_GUARD_S

SIM = "simulated cuda:0 (computes on the CPU)"


def module(name, cls, params, inputs, device_calls, cpu_calls):
    return {"name": name, "class": cls, "calls": device_calls + cpu_calls, "device_calls": device_calls,
            "cpu_calls": cpu_calls, "param_devices": params, "input_devices": inputs}


def run(label, role, mode, losses, modules=(), nested=0, status="max_steps", **extra):
    device_calls = sum(m["device_calls"] for m in modules) + nested
    return dict({"label": label, "role": role, "script": "train.py", "mode": mode, "status": status,
                 "device_name": SIM if mode == "sim" else mode, "steps": len(losses), "losses": list(losses),
                 "step_times": [0.01, 0.012, 0.011][:max(0, len(losses) - 1)], "modules": list(modules),
                 "events": [], "device_forward_calls": device_calls, "trained_devices": [],
                 "exception": None}, **extra)


def passing_report():
    a = [4.0, 2.0, 1.0, 0.5]
    b = [4.0, 2.1, 1.2, 0.6]  # a device run that drifts a little: its curve must show apart
    runs = [
        run("original (cpu)", "original", "cpu", a, [module("model", "Net", ["cpu"], ["cpu"], 0, 4)]),
        run("migrated (sim)", "migrated", "sim", b, [module("model", "Net", ["cuda:0"], ["cuda:0"], 4, 0),
                                                    module("criterion", "MSELoss", [], ["cuda:0"], 4, 0)],
            nested=8),
        run("migrated (cpu)", "migrated", "cpu", a),
        run("no losses (cpu)", "migrated", "cpu", []),
    ]
    comparisons = [{"run": "migrated (sim)", "reference": "original (cpu)", "method": "trend", "ok": True,
                    "compared": 4, "max_rel_diff": 0.17},
                   {"run": "migrated (cpu)", "reference": "original (cpu)", "method": "step", "ok": True,
                    "compared": 4, "max_rel_diff": 0.0}]
    settings = {"script": "train.py", "against": "train_cpu.py", "args": [], "device": "auto", "max_steps": 4,
                "seed": 0}
    return {"verdict": "pass", "reasons": [], "comparisons": comparisons, "runs": runs, "settings": settings}


def failing_report():
    bad = run("migrated (sim)", "migrated", "sim", [], [module("<b>model</b>", "Net", ["cpu"], ["cuda:0"], 0, 1)],
              status="error",
              exception={"type": "RuntimeError", "message": "Expected all tensors <on> the same device",
                         "file": "train.py", "line": 3})
    bad["events"] = [{"kind": "device-input-to-cpu-module", "module": "<b>model</b>",
                      "where": {"file": "train.py", "line": 27}}]
    reasons = [{"run": "migrated (sim)", "cause": "<script>alert('x')</script> stayed on the CPU",
                "rule": "CG101", "rule_name": "model-not-moved", "where": None}]
    settings = {"script": "a&b.py", "against": None, "args": [], "device": "sim", "max_steps": None, "seed": 0}
    return {"verdict": "fail", "reasons": reasons, "comparisons": [], "runs": [bad], "settings": settings}


VOID = {"meta", "line", "rect", "circle", "br"}  # no end tag, or written self-closed


class Page(HTMLParser):
    """The elements of a page, with their attributes, and the text under given ids."""

    def __init__(self, text):
        super().__init__()
        self.tags = []  # (tag, attrs, open svg depth)
        self.stack = []
        self.texts = {}
        self.rows = {}  # table id -> rows of cell texts
        self._table = None
        self._row = None
        self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs, [t for t, _ in self.stack]))
        if tag == "table":
            self._table = attrs.get("id")
            self.rows.setdefault(self._table, [])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        if tag not in VOID:
            self.stack.append((tag, attrs.get("id")))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows[self._table].append(self._row)
            self._row = None
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for _, ident in self.stack:
            if ident:
                self.texts[ident] = self.texts.get(ident, "") + data

    def all(self, tag):
        return [(a, parents) for t, a, parents in self.tags if t == tag]


def points(attrs):
    return [tuple(map(float, p.split(","))) for p in attrs["points"].split()]


def test_one_svg_with_one_curve_per_run_that_has_losses():
    page = Page(to_html(passing_report()))
    assert len(page.all("svg")) == 1
    curves = page.all("polyline")
    assert all("svg" in parents for _, parents in curves)
    assert [a["data-run"] for a, _ in curves] == ["original (cpu)", "migrated (sim)", "migrated (cpu)"]
    original, sim, _ = (points(a) for a, _ in curves)
    assert len(original) == len(sim) == 4
    xs = [x for x, _ in original]
    assert xs == sorted(xs) and len(set(xs)) == 4
    ys = [y for _, y in original]  # the loss falls: on the screen, the curve goes down
    assert ys == sorted(ys) and len(set(ys)) == 4
    assert [p[1] for p in sim[1:]] != ys[1:]  # the drifting run is drawn where its losses are
    # Runs with the same losses hide one another: the legend says so.
    assert "migrated (cpu)" in page.texts["legend"]
    assert "(the same losses as original (cpu): the curves lie on one another)" in page.texts["legend"]


def test_the_tables_and_the_verdict():
    page = Page(to_html(passing_report()))
    audit = page.rows["audit"]
    assert audit[0][:5] == ["run", "module", "class", "parameters on", "inputs on"]
    assert ["migrated (sim)", "model", "Net", "cuda:0", "cuda:0", "4", "4", "0"] in audit
    assert ["migrated (sim)", "criterion", "MSELoss", "no parameters", "cuda:0", "4", "4", "0"] in audit
    assert ["original (cpu)", "model", "Net", "cpu", "cpu", "4", "0", "4"] in audit
    times = page.rows["step-times"]
    assert [r[0] for r in times[1:]] == ["original (cpu)", "migrated (sim)", "migrated (cpu)"]
    assert times[1][3] == "11.000" and times[1][4] == "1.00×"
    assert [r[0] for r in page.rows["runs"][1:]] == [r["label"] for r in passing_report()["runs"]]

    (verdict, _), = [(a, p) for a, p in page.all("section") if a.get("id") == "verdict"]
    assert verdict["data-verdict"] == "pass"
    text = page.texts["verdict"]
    assert "verdict: PASS" in text
    assert "trains on the device: migrated (sim), model 4 + criterion 4 calls on the device" in text
    assert "learns the same: migrated (cpu) has the same losses over 4 steps" in text


def test_the_page_loads_nothing_and_escapes_every_text():
    for report in (passing_report(), failing_report()):
        text = to_html(report)
        page = Page(text)
        assert not page.all("script") and not page.all("link") and not page.all("img")
        for tag, attrs, _ in page.tags:
            for name in ("src", "href", "xlink:href"):
                assert name not in attrs, (tag, attrs)
        assert "http://" not in text and "https://" not in text and "@import" not in text

    page = Page(to_html(failing_report()))
    assert page.all("b") == []  # the module named <b>model</b> stays text
    assert page.texts["verdict"].count("<script>alert('x')</script> stayed on the CPU") == 1
    assert "verdict: FAIL" in page.texts["verdict"] and "CG101 (model-not-moved)" in page.texts["verdict"]
    assert "RuntimeError: Expected all tensors <on> the same device" in page.texts["verdict"]
    assert ["migrated (sim)", "<b>model</b>", "Net", "cpu", "cuda:0", "1", "0", "1"] in page.rows["audit"]
    assert "a device tensor reached CPU module <b>model</b> at train.py:27" in page.texts["events"]
    assert page.texts["no-losses"].startswith("No loss was recorded")


def test_losses_that_are_not_finite_are_left_out_of_the_curve():
    report = passing_report()
    report["runs"][1]["losses"] = [4.0, math.nan, math.inf, 0.5]
    page = Page(to_html(report))
    sim = next(a for a, _ in page.all("polyline") if a["data-run"] == "migrated (sim)")
    assert len(points(sim)) == 2
    assert "2 non-finite losses not drawn" in to_html(report)


def test_the_text_audit_reads_as_meant():
    text = to_text(passing_report())
    assert "criterion (MSELoss): no parameters; inputs on cuda:0; 4 calls (4 on the device, 0 on the CPU)" in text
    assert "model (Net): parameters on cuda:0; inputs on cuda:0; 4 calls" in text
    assert "parameters no parameters" not in text
    # The run's total counts the nested modules' calls too: said so, next to the sum of the listed ones.
    assert ("trains on the device: migrated (sim), model 4 + criterion 4 calls on the device "
            "(16 counting the calls of their nested modules)") in text
    assert text.splitlines()[0] == "cpu2gpu verify train.py --against train_cpu.py --device auto (first 4 steps)"
    assert "1 call (0 on the device, 1 on the CPU)" in to_text(failing_report())


# -- in a browser ---------------------------------------------------------------------------------

def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG, without PIL."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(chromium() is None, reason="no chromium binary (apt-get install chromium) to render the page")
def test_a_browser_draws_the_page(tmp_path):
    page, shot = tmp_path / "report.html", tmp_path / "out.png"
    page.write_text(to_html(passing_report()), encoding="utf-8")
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1000,800",
                    page.as_uri()], capture_output=True, timeout=HANG_GUARD_S, cwd=tmp_path)
    assert shot.exists() and os.path.getsize(shot) > 10_000
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1000, 800)
    assert len({px for row in rows for px in row}) > 20  # not one flat colour
    # The curves are drawn: the first (light blue, under the others) and the second (red) run's
    # colours fill many screen rows, far more than their legend's 3-pixel swatches.
    blue_rows = sum(any(b > r + 50 and b > g + 20 for r, g, b in row) for row in rows)
    red_rows = sum(any(r > g + 80 and r > b + 80 for r, g, b in row) for row in rows)
    assert blue_rows > 50 and red_rows > 50, (blue_rows, red_rows)
