"""Report figures a reader can put in a paper (docs/experiments.md section 5): the
consumption on its own scale with the allocation as a reference, rates on a zoomed axis,
text of 10 pt or more, the legend beside the panels, one word "abandoned", counts
without needless decimals, and the routing sections only where routing data exist; and
a headless browser's screenshot of the report, in which each scheduler's colour in
figure 4 is drawn (skipped where no chromium is installed)."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from gmm_volunteer.experiments import figures, report, routing_report
from gmm_volunteer.experiments.combine import open_combined
from gmm_volunteer.experiments.sweep import load_grid, run_sweep

from helpers import fake_simulate, write_tiny_grid

SCHEDULERS = ["centralized", "uniform", "affinity"]
# two seeds keep the fixture cheap; the report's warning about them is expected here
pytestmark = pytest.mark.filterwarnings("ignore:paired differences of p99 over 2 seeds")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paper")
    grid = load_grid(write_tiny_grid(tmp, grid={
        "users.count": [100, 1000], "server.capacity": [10, 30], "scheduler": SCHEDULERS}, seeds=2))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    return open_combined(grid.output)


def _texts(fig):
    for ax in fig.axes:
        yield from ax.get_xticklabels() + ax.get_yticklabels()
        yield ax.xaxis.label
        yield ax.yaxis.label
        yield ax.title
        if ax.get_legend() is not None:
            yield from ax.get_legend().get_texts()


def test_text_is_readable_and_the_legend_sits_beside_the_panels(sweep):
    for name, make in figures.FIGURES.items():
        fig = make(sweep)
        sizes = [t.get_fontsize() for t in _texts(fig) if t.get_text()]
        assert sizes and min(sizes) >= 10, (name, min(sizes))
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert len(legends) == 1, name
        fig.canvas.draw()
        box = legends[0].get_window_extent()
        last = fig.axes[len(fig.axes) // (2 if name in ("fig4_server", "fig5_subtasks") else 1) - 1]
        panel = last.get_window_extent()
        gap_in = (box.x0 - panel.x1) / fig.dpi
        assert 0 <= gap_in < 0.3, (name, gap_in)  # beside the last panel, not stranded
        assert box.y1 <= panel.y1 + 1  # level with its top
        figures.png_bytes(fig)


def test_one_word_for_abandoned(sweep):
    fig = figures.fig2_requests(sweep)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()] if fig.axes[0].get_legend() \
        else [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("abandoned" in label for label in labels)
    assert not any("cancelled" in t.get_text().lower() for t in _texts(fig))
    assert "cancelled" not in fig._suptitle.get_text().lower()
    page = report.render_html(sweep)
    assert "cancelled requests" not in page and "Figure 2: completed vs abandoned requests" in page


def test_consumption_is_on_its_own_scale_not_the_allocations():
    import matplotlib.pyplot as plt

    x = np.arange(3)
    # close means, allocation ten times above: linear, scaled to the consumption, noted
    fig, ax = plt.subplots()
    figures._allocation_reference(ax, x, np.array([2000.0] * 3), 300.0, np.array([100.0, 200.0, 250.0]), "%")
    assert ax.get_yscale() == "linear" and ax.get_ylim() == pytest.approx((0.0, 330.0))
    assert any("allocation 2,000 %" in t.get_text() for t in ax.texts)
    # allocation within twice the consumption: a dashed reference line inside the axis
    fig, ax = plt.subplots()
    figures._allocation_reference(ax, x, np.array([400.0] * 3), 300.0, np.array([100.0, 200.0, 250.0]), "%")
    assert [ln.get_label() for ln in ax.lines] == ["allocation (mean)"] and ax.get_ylim()[1] >= 400
    # means more than 20 times apart: a log axis, from below the smallest to above the allocation
    fig, ax = plt.subplots()
    figures._allocation_reference(ax, x, np.array([2000.0] * 3), 300.0, np.array([0.5, 1.0, 250.0]), "%")
    assert ax.get_yscale() == "log"
    lo, hi = ax.get_ylim()
    assert lo <= 0.25 and hi >= 2000
    plt.close("all")
    assert figures.consumption_scale(np.array([0.0, 1.0, 19.0])) == "linear"
    assert figures.consumption_scale(np.array([1.0, 21.0, np.nan])) == "log"


def test_rates_get_a_zoomed_axis():
    lo, hi = figures.rate_limits(np.array([0.97, 0.985, 1.0]))
    assert lo == pytest.approx(0.967) and hi == 1.0  # a tenth of the 0.03 range below; none above 1
    lo, hi = figures.rate_limits(np.array([1.0, 1.0]))
    assert (lo, hi) == (pytest.approx(0.989), 1.0)  # at least 0.01 wide, ending at 1
    lo, hi = figures.rate_limits(np.array([0.999, 0.9995]))
    assert hi == 1.0 and hi - lo >= 0.01
    lo, hi = figures.rate_limits(np.array([0.0, 0.0]))
    assert lo == 0.0 and hi >= 0.01
    assert figures.rate_limits(np.array([np.nan])) == (0.0, 1.0)
    assert figures.rate_limits(np.array([0.0, 0.5])) == (0.0, pytest.approx(0.55))
    assert figures.rate_limits(np.array([0.5, 0.6])) == (pytest.approx(0.49), pytest.approx(0.61))


def test_the_rate_axis_never_runs_above_one(sweep):
    """Figure 5's panels end at a rate of 1 at most, and its markers are drawn unclipped
    so that a rate of 1 on the top edge shows whole."""
    fig = figures.fig5_subtasks(sweep)
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        assert 0.0 <= lo < hi <= 1.0
        assert all(not ln.get_clip_on() for ln in ax.get_lines())


def test_fig4_panels_follow_the_consumption(sweep):
    fig = figures.fig4_server(sweep)
    sc = figures.analysis.server_consumption(figures.prepare(sweep))
    top = float((sc["mean"] + sc["sd"]).sel(resource="cpu").max())
    alloc = float(sc["allocation_mean"].sel(resource="cpu").max())
    for ax in fig.axes[: sweep.sizes["server_capacity"]]:  # the CPU row
        lo, hi = ax.get_ylim()
        if ax.get_yscale() == "linear":
            assert hi <= max(1.1 * top, 1.05 * alloc) * 1.001 and hi >= top
        names = [ln.get_label() for ln in ax.lines]
        assert [n for n in names if n.lower() in SCHEDULERS] == [s.capitalize() for s in SCHEDULERS]


def test_counts_print_without_needless_decimals():
    df = pd.DataFrame({"completed": [56.0, 193.5], "P99 all types (s)": [2.0, 6.125], "seeds": [2.0, 2.0]})
    html = report._table_html(df)
    assert "<td>56</td>" in html and "<td>193.5</td>" in html and "56.00" not in html
    assert "<td>2.00</td>" in html and "<td>6.12</td>" in html  # a latency keeps two decimals
    assert html.count("<td>2</td>") == 2  # seeds


def test_a_column_s_format_follows_what_it_holds_not_its_values():
    """A P99 of whole seconds prints as 3.00 beside 2.50, not as 3; a completion rate of
    0.996 as 0.996, not as 1.00."""
    df = pd.DataFrame({"seeds": [3, 3], "P99 all types (s)": [3.0, 4.0], "P99 min type (s)": [2.5, 1.5],
                       "completion rate server": [0.996, 1.0]})
    html = report._table_html(df)
    assert "<td>3.00</td>" in html and "<td>4.00</td>" in html and "<td>2.50</td>" in html
    assert "<td>4</td>" not in html
    assert "<td>0.996</td>" in html and "<td>1.000</td>" in html and "<td>1.00</td>" not in html
    assert html.count("<td>3</td>") == 2  # seeds


def test_a_plain_scheduler_sweep_gets_no_routing_sections(sweep):
    assert not routing_report.applies(sweep)
    page = report.render_html(sweep)
    for title in ("Routing comparison", "Herding per step", "The seeds' own statistics",
                  "Delay estimator"):
        assert title not in page
    assert "Overview (means over seeds)" in page


def _colour_pixels(png: bytes, rgb) -> int:
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((np.abs(a - np.array(rgb)).sum(axis=2) < 30).sum())


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium for the screenshot")
def test_a_headless_screenshot_of_the_report_shows_every_schedulers_consumption(sweep, tmp_path):
    pytest.importorskip("PIL")
    page = report.render_html(sweep)
    fig4 = page[page.index("<h2>Figure 4"):page.index("<h2>Figure 5")]
    # a page of figure 4 alone, as the report draws it, taken by the browser
    (tmp_path / "fig4.html").write_text("<!DOCTYPE html><html><body style='margin:0'>" + fig4 + "</body></html>")
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1300,1100", f"--screenshot={shot}", (tmp_path / "fig4.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    png = shot.read_bytes()
    embedded = base64.b64decode(re.search(r'base64,([^"]+)"', fig4).group(1))
    for name, rgb in (("centralized", (214, 39, 40)), ("uniform", (31, 119, 180)), ("affinity", (44, 160, 44))):
        assert _colour_pixels(embedded, rgb) > 50, name  # drawn in the figure ...
        assert _colour_pixels(png, rgb) > 50, name  # ... and shown by the browser
    assert _colour_pixels(png, (255, 255, 255)) < 0.98 * 1300 * 1100  # not a blank page
