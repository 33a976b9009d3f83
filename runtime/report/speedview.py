"""verify --speed's section of the text and HTML reports: where the GPU would idle, the counts per step, the
estimate, the causes ranked with their lines and fixes, and what the estimate leaves out."""

from __future__ import annotations

import html

from ..records import SpeedMigration, SpeedReport, SpeedStep
from ..speed.findings import byte_size, milliseconds


def _n(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.1f}"


def counts_line(c: SpeedStep) -> str:
    """The median step's counts and host times, in words."""
    return (f"{_n(c['syncs'])} host syncs, {_n(c['copies_in'])} copies to the device ({byte_size(c['bytes_in'])}, "
            f"{_n(c['pinned_in'])} pinned), {_n(c['copies_out'])} to the host, {_n(c['kernels'])} kernels "
            f"({_n(c['ops'])} ops with views), {_n(c['allocations'])} allocations ({byte_size(c['allocated_bytes'])}); "
            f"host {milliseconds(c['host_s'])} of its own work, {milliseconds(c['data_wait_s'])} waiting for batches, "
            f"{milliseconds(c['kernel_s'])} in the simulated kernels (left out: the GPU runs them)")


def head(speed: SpeedReport) -> str:
    run = f" from {speed['run']}" if speed.get("run") else ""
    steps = speed.get("steps") or 0
    counted = f" ({steps - 1} steps after the first)" if steps > 1 else ""
    return f"speed, estimated for {speed['gpu']}{run}{counted}:"


def lines(speed: SpeedReport) -> list[str]:
    """The text report's section."""
    out = ["", "  " + head(speed), f"    {speed['summary']}"]
    counts = speed.get("counts")
    if counts:
        out.append(f"    per step (medians): {counts_line(counts)}")
    est = speed.get("estimate")
    if est:
        device = est["busy_s"] + est["launch_s"] + est["copy_s"]
        out.append(f"    estimated step: {milliseconds(est['step_s'])}, the device busy {milliseconds(device)} of it (kernels' work "
                   f"{milliseconds(est['busy_s'])}, launches {milliseconds(est['launch_s'])}, copies {milliseconds(est['copy_s'])}), the host "
                   f"{milliseconds(est['host_s'])}; {est['flops'] / 1e6:.3g} MFLOP a step")
    causes = speed.get("causes") or []
    if causes:
        out.append("    causes, by the idle time they explain:")
        for i, c in enumerate(causes, 1):
            out.append(f"      {i}. ~{milliseconds(c['seconds'])} a step ({c['share']:.1%}): {c['what']}")
            out.append(f"         fix: {c['fix']}")
    elif est:
        out.append("    causes: none")
    if speed.get("omits") and est:
        out.append(f"    {speed['omits']}")
    return out


def section(speed: SpeedReport) -> str:
    """The HTML report's section."""
    e = html.escape
    parts = [f"<h2>Speed: {e(head(speed).rstrip(':'))}</h2>", f"<p><strong>{e(speed['summary'])}</strong></p>"]
    counts = speed.get("counts")
    if counts:
        parts.append(f'<p class="settings">per step (medians): {e(counts_line(counts))}</p>')
    causes = speed.get("causes") or []
    if causes:
        rows = "".join(f'<tr><td class="num">{i}</td><td class="num">{e(milliseconds(c["seconds"]))}</td>'
                       f'<td class="num">{c["share"]:.1%}</td><td>{e(c["what"])}</td><td>{e(c["fix"])}</td></tr>'
                       for i, c in enumerate(causes, 1))
        parts.append("<table><tr><th>#</th><th>a step</th><th>share</th><th>cause</th><th>fix</th></tr>"
                     f"{rows}</table>")
    if speed.get("omits") and speed.get("estimate"):
        parts.append(f'<p class="settings">{e(speed["omits"])}</p>')
    return "\n".join(parts)


def edits_lines(story: SpeedMigration) -> list[str]:
    """migrate --speed's section: the estimated step before and after, the edits kept, the others and why."""
    out = [f"speed edits, estimated for {story['gpu']}:"]
    if story.get("note"):
        return out + [f"  none: {story['note']}"]
    before, after = story["before"], story["after"]
    if before and after:
        out.append(f"  estimated step {milliseconds(before['step_s'])} -> {milliseconds(after['step_s'])} "
                   f"({before['step_s'] / after['step_s']:.2f}x), the GPU idle {before['idle_fraction']:.0%} -> "
                   f"{after['idle_fraction']:.0%} of it")
    for edit in story["edits"]:
        saves = f", ~{milliseconds(edit['seconds'])} a step" if edit.get("seconds") else ""
        out.append(f"  kept: {edit['file']}:{edit['line']}: `{edit.get('edit', '')}` ({edit.get('how', '')}{saves})")
    if story["edits"]:
        explained = sum(edit.get("seconds", 0.0) for edit in story["edits"])
        out.append(f"  the device run's {story['losses_same']} losses are the same, float for float, with these "
                   f"edits as without them; their causes explained ~{milliseconds(explained)} of the estimated step "
                   f"(each from the run before it: the two estimates above are two runs' host times, which this "
                   f"machine's load moves too)")
    for edit in story["not_edited"]:
        where = f"{edit['file']}:{edit['line']}" if edit.get("file") else "(no line)"
        tried = f" `{edit['edit']}`" if edit.get("edit") else ""
        out.append(f"  not edited: {where} ({edit['cause']}){tried}: {edit.get('why', '')}")
    if not story["edits"] and not story["not_edited"]:
        out.append("  no cause found: nothing to edit")
    out.append(f"  now (the migrated files' lines): {story['summary_after']}")
    return out


def edits_section(story: SpeedMigration) -> str:
    """migrate --speed's section of the HTML report."""
    e = html.escape
    lines = edits_lines(story)
    items = "".join(f"<li>{e(line.strip())}</li>" for line in lines[1:])
    return f"<h2>{e(lines[0].rstrip(':'))}</h2><ul>{items}</ul>"
