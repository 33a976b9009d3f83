"""A verification as one self-contained HTML page: the loss curves of every run
on one inline SVG plot, the step times, the device audit and the verdict with
its reasons.

Self-contained on purpose: the page is opened from a CI artifact or a mail, so
it loads nothing (no script, no style sheet, no font, no network). Every text
that comes from a run goes through html.escape.
"""

from __future__ import annotations

import html
import math

from ..records import SpeedMigration, VerifiedRun, VerifyReport
from .speedview import edits_section, section as speed_section
from .report import EVENT_NAMES, STATUS_NAMES, pass_lines, coverage_lines, device_calls, run_rows, summary

WIDTH, HEIGHT = 900, 380
LEFT, RIGHT, TOP, BOTTOM = 78, 24, 18, 48
MAX_POINTS = 2000  # more points than pixels only make the file larger
COLOURS = ["#1f5fbf", "#d03a2c", "#2b9a48", "#8a4fc0", "#e07b00", "#3a3a3a"]
# The first curve is drawn wide and light, the next ones thinner and dashed: runs that
# computed the same losses lie on one another and all stay visible.
STROKES = [("5", "", "0.45"), ("2.5", "9 5", "0.95"), ("2", "2 4", "1"), ("2", "12 3 3 3", "1")]
SWATCHES = ["solid", "dashed", "dotted", "dashed"]  # the CSS look of each STROKES entry
VERDICTS = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "needs-data": "NEEDS DATA"}

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1c1c1c; margin: 24px auto;
       max-width: 980px; padding: 0 16px; }
h1 { font-size: 21px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 13px; }
.settings { color: #555; margin: 0 0 16px; }
.verdict { border-radius: 6px; padding: 10px 14px; border: 1px solid; }
.verdict.pass { background: #e8f6ec; border-color: #2b9a48; }
.verdict.fail, .verdict.error { background: #fbeaea; border-color: #d03a2c; }
.verdict.needs-data, .verdict.unproven { background: #fff5e0; border-color: #e07b00; }
.verdict strong { font-size: 18px; }
.verdict ul { margin: 6px 0 2px; padding-left: 20px; }
table { border-collapse: collapse; margin: 4px 0; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #e2e2e2; vertical-align: top; }
th { font-weight: 600; border-bottom-color: #999; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; height: 10px; background: #1f5fbf; vertical-align: middle; }
.legend span.swatch { display: inline-block; width: 34px; margin: 0 6px 3px 0; vertical-align: middle;
                      border-top-width: 3px; }
.legend div { margin: 2px 0; }
.warn { color: #b3261e; }
svg text { font: 12px system-ui, sans-serif; fill: #444; }
"""


def e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(x, spec=".6g") -> str:
    return "-" if x is None else format(x, spec)


# -- the plot -------------------------------------------------------------------------------------

def _nice_step(span: float, count: int = 5) -> float:
    raw = span / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next((m * mag for m in (1, 2, 5) if m * mag >= raw), 10 * mag)


def _linear_ticks(lo: float, hi: float) -> list:
    step = _nice_step(hi - lo)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def _series(runs: list[VerifiedRun]) -> list:
    """(run, [(step, loss)]) for each run with a finite loss; steps count from 1."""
    out = []
    for run in runs:
        points = [(i + 1, x) for i, x in enumerate(run.get("losses") or [])
                  if isinstance(x, (int, float)) and math.isfinite(x)]
        if points:
            out.append((run, points))
    return out


def _thin(points: list) -> list:
    if len(points) <= MAX_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_POINTS)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def loss_plot(runs: list[VerifiedRun]) -> str:
    series = _series(runs)
    if not series:
        return '<p id="no-losses">No loss was recorded (no <code>.backward()</code> call): nothing to plot.</p>'
    values = [y for _, pts in series for _, y in pts]
    lo, hi = min(values), max(values)
    log = lo > 0 and hi / lo >= 20
    if log:
        ylo, yhi = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        yhi = yhi if yhi > ylo else ylo + 1
        yticks = [10.0 ** k for k in range(int(ylo), int(yhi) + 1)]
        fy = lambda v: math.log10(v)  # noqa: E731
    else:
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        ylo, yhi = lo - pad, hi + pad
        yticks = _linear_ticks(ylo, yhi)
        fy = lambda v: v  # noqa: E731
    xmax = max(len(pts) and pts[-1][0] for _, pts in series)
    xmax = max(xmax, 2)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(step):
        return LEFT + (step - 1) / (xmax - 1) * pw

    def py(v):
        return TOP + ph - (fy(v) - ylo) / (yhi - ylo) * ph

    parts = [f'<svg id="losses" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" aria-label="loss per step of every run">',
             f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#bbb"/>']
    for t in yticks:
        y = py(t)
        if TOP - 0.5 <= y <= TOP + ph + 0.5:
            parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
            parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{e(format(t, ".3g"))}</text>')
    for t in _linear_ticks(1, xmax):
        if t < 1 or t != int(t):
            continue
        x = px(t)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + ph}" y2="{TOP + ph + 5}" stroke="#888"/>')
        parts.append(f'<text x="{x:.1f}" y="{TOP + ph + 19}" text-anchor="middle">{int(t)}</text>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 8}" text-anchor="middle">step (loss recorded at each '
                 f'backward call)</text>')
    ylabel = "loss (log scale)" if log else "loss"
    parts.append(f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')
    for i, (run, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        width, dash, opacity = STROKES[min(i, len(STROKES) - 1)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in _thin(pts))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline data-run="{e(run["label"])}" points="{coords}" fill="none" stroke="{colour}" '
                     f'stroke-width="{width}" stroke-opacity="{opacity}"{dash_attr} stroke-linejoin="round">'
                     f'<title>{e(run["label"])}: {len(pts)} losses, last {e(_num(pts[-1][1]))}</title></polyline>')
        if len(pts) == 1:  # one point draws no line
            x, y = pts[0]
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n" + _legend(series)


def _legend(series: list) -> str:
    rows = []
    for i, (run, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        style = SWATCHES[min(i, len(SWATCHES) - 1)]
        opacity = STROKES[min(i, len(STROKES) - 1)][2]
        dropped = len(run.get("losses") or []) - len(pts)
        note = f' <span class="warn">({dropped} non-finite losses not drawn)</span>' if dropped else ""
        twin = next((r for r, _ in series[:i] if r.get("losses") == run.get("losses")), None)
        if twin is not None:
            note += f" (the same losses as {e(twin['label'])}: the curves lie on one another)"
        rows.append(f'<div><span class="swatch" style="border-top-style: {style}; border-top-color: {colour}; opacity: {opacity}">'
                    f'</span>{e(run["label"])} <span class="mono">{e(run.get("device_name") or run["mode"])}</span>'
                    f' — {len(pts)} losses, first {e(_num(pts[0][1]))}, last {e(_num(pts[-1][1]))}{note}</div>')
    return '<div class="legend" id="legend">' + "".join(rows) + "</div>"


# -- the tables -----------------------------------------------------------------------------------

def runs_table(report: VerifyReport) -> str:
    rows = []
    for s, diff in run_rows(report):
        status = STATUS_NAMES.get(s["status"], s["status"])
        rows.append(f'<tr><td>{e(s["label"])}</td><td>{e(s["device"] or s["mode"])}</td><td>{e(status)}</td>'
                    f'<td class="num">{s["steps"]}</td><td class="num">{e(_num(s["first_loss"]))}</td>'
                    f'<td class="num">{e(_num(s["last_loss"]))}</td><td class="num">{e(diff)}</td></tr>')
    return ('<table id="runs"><tr><th>run</th><th>device</th><th>status</th><th>steps</th><th>first loss</th>'
            '<th>last loss</th><th>max rel diff</th></tr>' + "".join(rows) + "</table>")


def step_times(report: VerifyReport) -> str:
    timed = [(run, summary(run, None)["ms_per_step"]) for run in report["runs"]]
    timed = [(run, ms) for run, ms in timed if ms is not None]
    if not timed:
        return '<p id="step-times">No step was timed (fewer than two optimizer steps).</p>'
    ref_run, ref = next(((run, ms) for run, ms in timed if run["role"] == "original"), timed[0])
    top = max(ms for _, ms in timed) or 1.0
    rows = []
    for run, ms in timed:
        ratio = f"{ms / ref:.2f}×" if ref else "-"
        rows.append(f'<tr><td>{e(run["label"])}</td><td>{e(run.get("device_name") or run["mode"])}</td>'
                    f'<td class="num">{len(run.get("step_times") or [])}</td><td class="num">{ms:.3f}</td>'
                    f'<td class="num">{ratio}</td>'
                    f'<td><span class="bar" style="width: {max(1, round(200 * ms / top))}px"></span></td></tr>')
    return ('<table id="step-times"><tr><th>run</th><th>device</th><th>steps timed</th><th>ms/step (median)</th>'
            f'<th>against {e(ref_run["label"])}</th><th></th></tr>' + "".join(rows) + "</table>"
            '<p class="settings">The time between consecutive optimizer steps, so the first step (warm-up) '
            'is not counted. A simulated device computes on the CPU: its times say nothing of a GPU.</p>')


def audit_table(report: VerifyReport) -> str:
    rows, events = [], []
    for run in report["runs"]:
        for m in run.get("modules", []):
            params = ", ".join(m["param_devices"]) or "no parameters"
            inputs = ", ".join(m["input_devices"]) or "no tensor inputs"
            rows.append(f'<tr><td>{e(run["label"])}</td><td class="mono">{e(m["name"])}</td><td>{e(m["class"])}</td>'
                        f'<td>{e(params)}</td><td>{e(inputs)}</td><td class="num">{m["calls"]}</td>'
                        f'<td class="num">{m["device_calls"]}</td><td class="num">{m["cpu_calls"]}</td></tr>')
        for ev in run.get("events", []):
            w = ev.get("where") or {}
            at = f" at {w['file']}:{w['line']}" if w.get("file") else ""
            what = EVENT_NAMES.get(ev["kind"], ev["kind"])
            events.append(f'<li class="warn">{e(run["label"])}: {e(what)} {e(ev["module"])}{e(at)}</li>')
    if not rows and not events:
        return '<p id="audit">No module was called.</p>'
    table = ('<table id="audit"><tr><th>run</th><th>module</th><th>class</th><th>parameters on</th><th>inputs on</th>'
             '<th>calls</th><th>on the device</th><th>on the CPU</th></tr>' + "".join(rows) + "</table>")
    note = ('<p class="settings">The modules the script called itself, and those a warning below names; '
            'a module\'s calls are those on the device plus those on the CPU.</p>')
    return table + note + (f'<ul id="events">{"".join(events)}</ul>' if events else "")


# -- the verdict ----------------------------------------------------------------------------------

def verdict_section(report: VerifyReport) -> str:
    v = report["verdict"]
    items = []
    if v == "pass":
        # the same evidence as the text report
        items = [e(line.strip()) for line in pass_lines(report)[1:]]
    for r in report["reasons"]:
        rule = f" — {r['rule']} ({r['rule_name']})" if r.get("rule") else ""
        items.append(f'<span class="reason">{e(r["run"])}: {e(r["cause"])}{e(rule)}</span>')
    if v == "unproven":
        items += [e(line.strip()) for line in coverage_lines(report)]
    if v != "pass":
        for run in report["runs"]:
            exc = run.get("exception")
            if exc and run["status"] not in ("ok", "max_steps") and exc.get("message"):
                items.append(f'<span class="mono">{e(run["label"])}: {e(exc["type"])}: '
                             f'{e(exc["message"].splitlines()[0][:300])}</span>')
    body = "".join(f"<li>{i}</li>" for i in items)
    return (f'<section id="verdict" class="verdict {e(v)}" data-verdict="{e(v)}"><strong>verdict: '
            f'{e(VERDICTS.get(v, v.upper()))}</strong>' + (f"<ul>{body}</ul>" if body else "") + "</section>")


def to_html(report: VerifyReport, speed_edits: SpeedMigration | None = None) -> str:
    """The report as one HTML file; ``speed_edits``: migrate --speed's story, after the speed section."""
    s = report["settings"]
    title = f"cpu2gpu verify {s['script']}"
    settings = [f"device {s.get('device', '-')}"]
    if s.get("against"):
        settings.insert(0, f"against {s['against']}")
    if s.get("max_steps"):
        settings.append(f"first {s['max_steps']} steps")
    settings.append(f"seed {s.get('seed', 0)}")
    dev = next((r for r in report["runs"] if r["mode"] in ("cuda", "sim", "sim-mps", "mps", "xpu") and r.get("device_forward_calls")), None)
    calls = f'<p class="settings">{e(dev["label"])}: {e(device_calls(dev))}.</p>' if dev else ""
    notes = "".join(f'<p class="settings">{e(c["run"])}: {e(c["note"])}</p>'
                    for c in report["comparisons"] if c.get("note"))
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p class="settings">{e(", ".join(settings))}</p>',
        verdict_section(report),
        "<h2>Loss per step</h2>",
        loss_plot(report["runs"]) + notes,
        runs_table(report),
        "<h2>Step times</h2>",
        step_times(report),
        "<h2>Device audit</h2>",
        calls + audit_table(report),
        speed_section(report["speed"]) if report.get("speed") else "",
        edits_section(speed_edits) if speed_edits else "",
        "</body></html>",
        "",
    ])
