"""Figures and the HTML report; the end-to-end path with the real engine."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

from gmm_volunteer.experiments import figures
from gmm_volunteer.experiments.combine import open_combined
from gmm_volunteer.experiments.report import _count_text as report_count_text, overview_table, render_html
from gmm_volunteer.experiments.sweep import load_grid, run_sweep

from helpers import fake_simulate, write_tiny_grid

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# the sweeps here have 2 seeds to stay cheap: the report's warning about them is expected
pytestmark = pytest.mark.filterwarnings("ignore:paired differences of p99 over 2 seeds")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    grid = load_grid(write_tiny_grid(tmp, grid={
        "users.count": [100, 1000], "users.capacity": [1, 2], "server.capacity": [10, 30],
        "scheduler": ["centralized", "uniform"]}, seeds=2))
    run_sweep(grid, serial=True, run_fn=fake_simulate, progress=False)
    return grid, open_combined(grid.output)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.srcs, self.hrefs = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if "src" in a:
            self.srcs.append(a["src"])
        if "href" in a:
            self.hrefs.append(a["href"])


def test_figures_have_one_panel_per_server_capacity(sweep):
    _, ds = sweep
    n_caps = ds.sizes["server_capacity"]
    for name, make in figures.FIGURES.items():
        fig = make(ds)
        rows = 2 if name in ("fig4_server", "fig5_subtasks") else 1
        assert len(fig.axes) == rows * n_caps, name
        assert [ax.get_title() for ax in fig.axes[:n_caps]] == ["Server 10x", "Server 30x"]
        assert figures.png_bytes(fig).startswith(PNG_MAGIC)


def test_figure_data_are_the_means_over_seeds(sweep):
    _, ds = sweep
    fig = figures.fig3_latency(ds)
    line = fig.axes[0].get_lines()[0]  # centralized at server 10x
    p = ds.gmmv.p99_across_types()["mean"].mean("seed")
    expected = [float(p.sel(users=u, user_capacity=c, server_capacity=10, scheduler="centralized"))
                for u in (100, 1000) for c in (1, 2)]
    np.testing.assert_allclose(line.get_ydata(), expected)
    fig5 = figures.fig5_subtasks(ds)
    user_row = fig5.axes[2]  # user nodes, server 10x: centralized omitted
    assert [ln.get_label() for ln in user_row.get_lines()] == ["Uniform"]


def test_report_is_self_contained_html(sweep, tmp_path):
    from gmm_volunteer.cli.commands import main

    grid, ds = sweep
    out = tmp_path / "report.html"
    assert main(["report", str(grid.output), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    parser = _Collect()
    parser.feed(text)
    assert parser.tags.count("img") == 5  # figures 2-5 and the findings' regime map
    for src in parser.srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
    assert not parser.hrefs and "http://" not in text and "https://" not in text
    assert "Provisional model bundle" in text
    assert "Paired P99 differences" in text
    table = overview_table(ds)
    assert len(table) == 2 * 2 * 2 * 2  # users x user_capacity x server_capacity x scheduler
    first = table.iloc[0]
    assert f"<td>{report_count_text(first['completed'])}</td>" in text  # a count: no needless decimals


def test_report_over_two_seeds_warns_once_and_gives_no_interval(sweep, tmp_path, capsys):
    """Over two seeds the bootstrap interval is the range of the two differences (width 0
    when they are equal): the paired table gives the mean and says n is too small."""
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.experiments.report import paired_table

    grid, ds = sweep
    assert ds.sizes["seed"] == 2
    out = tmp_path / "two_seeds.html"
    assert main(["report", str(grid.output), "-o", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1, err
    assert warned[0].startswith("gmmv report: warning: paired differences of p99 over 2 seeds: "
                                "no interval is given"), err
    text = out.read_text(encoding="utf-8")
    assert "No intervals: 2 seeds are too few" in text and "95% bootstrap intervals</h2>" not in text
    with pytest.warns(UserWarning, match="over 2 seeds"):
        table = paired_table(ds)
    assert set(table.columns) == {"comparison", "mean (s)", "seeds"}
    assert "mean (s)" in text and "low (s)" not in text


def test_paired_table_over_three_seeds_gives_intervals(sweep):
    from gmm_volunteer.experiments.report import paired_table

    _, ds = sweep
    three = xr.concat([ds, ds.isel(seed=[0]).assign_coords(seed=[ds["seed"].values.max() + 1])], "seed")
    table = paired_table(three)
    assert {"mean (s)", "low (s)", "high (s)"} <= set(table.columns) and (table["seeds"] == 3).all()
    assert (table["low (s)"] <= table["mean (s)"]).all() and (table["mean (s)"] <= table["high (s)"]).all()


def test_every_table_orders_its_rows_as_the_grid(sweep):
    from gmm_volunteer.experiments.report import latency_by_type_table, paired_table

    _, ds = sweep
    grid = [d for d in ds.dims if d in ("users", "user_capacity", "server_capacity", "scheduler")]
    assert list(overview_table(ds).index.names) == grid
    assert list(latency_by_type_table(ds).index.names) == grid
    with pytest.warns(UserWarning, match="over 2 seeds"):
        assert list(paired_table(ds).index.names) == [d for d in grid if d != "scheduler"]


def test_report_cli_on_a_non_sweep_exits_2(tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")]) == 2
    assert not (tmp_path / "r.html").exists()


def test_report_marks_missing_runs(sweep, tmp_path):
    _, ds = sweep
    partial = ds.load().copy()
    partial["run_complete"][dict(users=0, user_capacity=0, server_capacity=0, scheduler=0, seed=0)] = False
    assert "Some runs are missing" in render_html(partial)


def test_end_to_end_sweep_and_report_with_the_engine(tmp_path):
    """The real engine on a tiny grid (synthetic model bundle): sweep -> combine -> report."""
    pytest.importorskip("gmm_volunteer.run.engine")
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    root = Path(__file__).parent.parent
    write_bundle(synthetic_bundle(), tmp_path / "bundle")
    spec = {
        "base": str(root / "configs/quickstart.yaml"),
        "grid": {"server.capacity": [10, 30], "scheduler": ["centralized", "uniform"]},
        "seeds": 1,
        "set": {"steps": 40, "users.count": 30, "model": str(tmp_path / "bundle")},
        "output": str(tmp_path / "out"),
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--serial", "--quiet"]) == 0
    ds = open_combined(tmp_path / "out")
    assert bool(ds["run_complete"].all()) and int(ds.attrs["steps"]) == 40
    assert np.all(np.isfinite(ds["server_allocation_mean"].values))
    assert main(["report", str(tmp_path / "out"), "-o", str(tmp_path / "r.html")]) == 0
    assert re.search(r"<img[^>]+data:image/png;base64", (tmp_path / "r.html").read_text())


def test_paper_findings_table_on_a_grid(sweep):
    """Every finding gets a verdict or says why it cannot be computed; the report shows it."""
    from gmm_volunteer.experiments.findings import FINDINGS, paper_findings

    _, ds = sweep
    table = paper_findings(ds)
    assert list(table.index) == [f.key for f in FINDINGS]
    assert set(table["verdict"]) <= {"holds", "does not hold", "n/a"}
    # This tiny grid has 10x and 30x and 1,000 users: these rules are computable on it.
    for key in ("central_user_capacity", "central_plateau", "uniform_matches_small", "uniform_wins_large",
                "central_cpu_saturates", "central_memory_demand"):
        assert table.loc[key, "verdict"] != "n/a", (key, table.loc[key, "ours"])
    # No 50x column: the capacity-plateau finding says why instead of guessing.
    assert table.loc["distributed_plateau", "verdict"] == "n/a"
    assert "section 3.2 findings" in render_html(ds)


def test_paper_findings_refuses_a_dataset_without_the_grid_dims(sweep):
    from gmm_volunteer.experiments.findings import paper_findings

    _, ds = sweep
    with pytest.raises(ValueError, match="grid dimensions"):
        paper_findings(ds.isel(scheduler=0, drop=True))


def test_report_images_are_described_by_their_captions(sweep):
    _, ds = sweep
    page = render_html(ds)
    alts = re.findall(r'<img alt="([^"]*)"', page)
    assert len(alts) == 5 and all(a.startswith("Figure ") for a in alts[:4]), alts
    assert alts[4].startswith("Regime map: ")


def test_fig4_band_does_not_go_below_zero(sweep):
    _, ds = sweep
    ds = figures.prepare(ds).copy()
    # A bursty server: sd over steps twice the mean, so mean - sd would be negative.
    ds["server_consumption_sd"] = 2.0 * ds["server_consumption_mean"]
    fig = figures.FIGURES["fig4_server"](ds)
    for ax in fig.axes:
        for coll in ax.collections:
            for path in coll.get_paths():
                assert path.vertices[:, 1].min() >= 0.0


def test_regime_map_restates_findings_cell_by_cell(tmp_path_factory):
    """Offered load from the store's own counts and the bundle's work at batch size 1, and
    the local rules on the same quantities as the findings table (issue 21 item 4)."""
    import numpy as np

    from gmm_volunteer.experiments import regime
    from gmm_volunteer.experiments.analysis import latency_quantile, request_counts, server_consumption
    from gmm_volunteer.io.bundlefiles import load_bundle

    tmp = tmp_path_factory.mktemp("regime")
    grid = load_grid(write_tiny_grid(tmp, grid={
        "users.count": [40, 120], "users.capacity": [1, 2], "server.capacity": [0.2, 2],
        "scheduler": ["centralized", "uniform"]}, seeds=1, steps=400))
    run_sweep(grid, serial=True, progress=False)
    ds = open_combined(grid.output)
    bundle = load_bundle(ds.attrs["model_bundle"])
    rho = regime.offered_load(ds, bundle)
    # by hand for one cell
    cell = dict(users=120, user_capacity=1, server_capacity=0.2, scheduler="centralized")
    counts = request_counts(ds, by_type=True).sum("outcome").sel(**cell).squeeze()
    work = regime.request_work(bundle)
    cores = float(server_consumption(ds)["allocation_mean"].sel(resource="cpu", **cell).squeeze()) / 100
    want = float((counts.values * work).sum()) / ds.attrs["steps"] / cores
    assert float(rho.sel(**cell).squeeze()) == pytest.approx(want, rel=1e-12)
    assert float(rho.sel(**cell).squeeze()) > float(rho.sel(**{**cell, "server_capacity": 2}).squeeze())
    v = regime.cell_verdicts(ds, bundle)
    assert set(v["finding"]) == set(regime.LOCAL)
    p99 = latency_quantile(ds, 0.99, all_types=True).squeeze()
    for _, row in v[v["finding"] == "uniform_p99_large"].iterrows():
        at = dict(users=row["users"], user_capacity=row["user_capacity"], server_capacity=row["server_capacity"])
        assert bool(row["holds"]) == bool(p99.sel(scheduler="uniform", **at) < p99.sel(scheduler="centralized", **at))
    assert figures.png_bytes(regime.regime_figure(v)).startswith(PNG_MAGIC)
    assert np.isfinite(v["rho"]).all()


def test_report_writes_figures_2_to_5_as_png_files(sweep, tmp_path):
    from gmm_volunteer.cli.commands import main

    grid, _ = sweep
    figs = tmp_path / "figs"
    assert main(["report", str(grid.output), "-o", str(tmp_path / "r.html"), "--quiet",
                 "--figures-dir", str(figs), "--figures-prefix", "x-"]) == 0
    names = sorted(p.name for p in figs.iterdir())
    assert names == ["x-fig2_requests.png", "x-fig3_latency.png", "x-fig4_server.png", "x-fig5_subtasks.png"]
    assert all((figs / n).read_bytes().startswith(PNG_MAGIC) for n in names)
    (tmp_path / "file").write_text("not a folder")
    assert main(["report", str(grid.output), "-o", str(tmp_path / "r2.html"), "--quiet",
                 "--figures-dir", str(tmp_path / "file")]) == 2


def test_combine_and_report_say_what_they_are_doing(sweep, tmp_path, capsys):
    """Phases that take minutes on a large sweep print a line or a bar: combining counts
    the run stores read, the report names each figure and the tables as it starts."""
    from gmm_volunteer.cli.commands import main

    grid, ds = sweep
    runs = int(ds.attrs["runs_total"])
    assert main(["combine", str(grid.output), "-o", str(tmp_path / "c.zarr")]) == 0
    err = capsys.readouterr().err
    assert re.search(rf"combining: 100%.* {runs}/{runs} ", err), err
    assert main(["report", str(grid.output), "-o", str(tmp_path / "r.html")]) == 0
    parts = [line for line in capsys.readouterr().err.splitlines() if line.endswith(" ...")]
    assert parts[:5] == ["report: preparing the statistics ...", "report: figure 2 ...",
                         "report: figure 3 ...", "report: figure 4 ...", "report: figure 5 ..."], parts
    assert "report: tables ..." in parts
    assert main(["combine", str(grid.output), "-o", str(tmp_path / "q.zarr"), "-q"]) == 0
    assert "combining" not in capsys.readouterr().err
