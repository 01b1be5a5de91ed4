"""Availability laws fitted from session traces (paper section 2.2, "Availability").

The paper fits its online and offline durations once, for users it assumes identical
(section 2.2), and names conditioning users on their own context as what a deployment
needs first (section 3.3). This module fits the laws per device class from a trace of
sessions (`traces/FORMAT.md`, "availability/"): for each class, the online spells (a
session's length) and the offline spells (the gap between two sessions of a device).

- A spell that began before the trace's window is left out: its start is unknown, and a
  spell that began inside the window is a draw of the law whatever its start (renewal).
- A spell still running when the window ends is right-censored: it contributes S(t).
- Every law the config accepts for `availability.online/offline` is fitted by maximum
  likelihood (weibull, lognormal, exponential, pareto) and the one with the smallest AIC
  is chosen; a law the config would refuse (a Pareto law with shape <= 1 has no
  stationary start, `config.Availability`) is reported and never chosen.
- Standard errors come from the observed information (the Hessian of the log-likelihood
  at the estimate, by central differences in log parameters, then the delta method). A
  Pareto scale is a boundary estimate (the smallest observed spell), without one.

The model's discrete durations are D = ceil(T) of the continuous law (`laws.discrete_duration`,
docs/model.md D1), so a law of T fitted from continuous session times is what the kernels
draw from.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gmm_volunteer.fitting.traces import TraceError
from gmm_volunteer.model import laws

FOLDER = "availability"
SESSIONS = "sessions.csv.gz"
WINDOW = "window.json"
COLUMNS = ("device", "class", "start_s", "end_s")
STATES = ("online", "offline")
CANDIDATES = ("weibull", "lognormal", "exponential", "pareto")
MIN_EVENTS = 20  # ended spells a class and state needs before a two-parameter law is fitted


@dataclass
class Spells:
    """Durations of one state of one class, in seconds; ``ended[i]`` False = right-censored."""

    duration: np.ndarray
    ended: np.ndarray
    resolution: float = 0.0  # an ended spell shorter than this is known only to be shorter

    @property
    def short(self) -> np.ndarray:
        """Ended spells below the trace's resolution (interval-censored in [0, resolution))."""
        return self.ended & (self.duration < self.resolution)

    @property
    def events(self) -> int:
        return int(self.ended.sum())


@dataclass
class LawFit:
    """A law fitted to `Spells`: parameters by config key, their standard errors, fit."""

    dist: str
    params: dict[str, float]
    se: dict[str, float]
    loglik: float
    aic: float
    accepted: bool = True  # False: the config refuses it (reason in `note`)
    note: str = ""

    def law(self) -> np.ndarray:
        return laws.law_array(self.dist, *(self.params[k] for k in laws.PARAMETERS[self.dist]))

    def config(self) -> dict:
        return {"dist": self.dist, **{k: float(f"{v:.6g}") for k, v in self.params.items()}}


@dataclass
class ClassFit:
    name: str
    devices: int
    share: float
    spells: dict[str, Spells]
    candidates: dict[str, list[LawFit]] = field(default_factory=dict)  # by AIC, best first

    def chosen(self, state: str) -> LawFit:
        return next(f for f in self.candidates[state] if f.accepted)


# ---------------------------------------------------------------------------------
# Reading the trace
# ---------------------------------------------------------------------------------


def read_sessions(folder: str | Path):
    """(sessions DataFrame, (window start, window end)) of `folder`; TraceError if unusable."""
    import pandas as pd

    folder = Path(folder)
    path, wpath = folder / SESSIONS, folder / WINDOW
    for p in (path, wpath):
        if not p.is_file():
            raise TraceError(f"{p}: missing (traces/FORMAT.md, 'availability/')")
    try:
        window = json.loads(wpath.read_text())
        w0, w1 = float(window["start_s"]), float(window["end_s"])
        resolution = float(window.get("resolution_s", 0.0))
    except (ValueError, KeyError, TypeError) as err:
        raise TraceError(f"{wpath}: needs numbers start_s and end_s ({err})") from None
    if not (math.isfinite(w0) and math.isfinite(w1) and w1 > w0):
        raise TraceError(f"{wpath}: end_s must be a finite number above start_s")
    if not (math.isfinite(resolution) and resolution >= 0):
        raise TraceError(f"{wpath}: resolution_s must be a number >= 0")
    try:
        df = pd.read_csv(path, dtype={"device": str, "class": str})
    except Exception as err:  # noqa: BLE001 - any unreadable file is the trace's fault
        raise TraceError(f"{path}: unreadable ({err})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
    for col in ("device", "class"):
        if df[col].isna().any():
            row = int(df.index[df[col].isna()][0]) + 2
            raise TraceError(f"{path}: column {col}: empty at line {row}")
    for col in ("start_s", "end_s"):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & df[col].notna()
        bad |= np.isinf(values)
        if bad.any():
            row = int(df.index[bad][0]) + 2
            raise TraceError(f"{path}: column {col}: not a number at line {row}")
        df[col] = values
    inside = lambda s: s.isna() | ((s >= w0) & (s <= w1))  # noqa: E731
    for col in ("start_s", "end_s"):
        if not inside(df[col]).all():
            row = int(df.index[~inside(df[col])][0]) + 2
            raise TraceError(f"{path}: column {col}: outside the window [{w0:g}, {w1:g}] at line {row}")
    both = df.start_s.notna() & df.end_s.notna()
    if (df.start_s[both] > df.end_s[both]).any():
        row = int(df.index[both & (df.start_s > df.end_s)][0]) + 2
        raise TraceError(f"{path}: line {row}: start_s is after end_s")
    return df, (w0, w1, resolution)


def spells(df, window) -> dict[str, dict[str, Spells]]:
    """Online and offline spells per class (see the module's docstring for censoring)."""
    w0, w1, resolution = window
    out: dict[str, dict[str, list]] = {}
    path = SESSIONS
    for (cls, device), g in df.sort_values(["class", "device", "start_s"], na_position="first").groupby(
        ["class", "device"], sort=True
    ):
        on_d, on_e, off_d, off_e = out.setdefault(cls, {"lists": ([], [], [], [])})["lists"]
        start = g.start_s.to_numpy()
        end = g.end_s.to_numpy()
        # a device's sessions in order must not overlap
        prev_end = None
        for s, e in zip(start, end):
            if prev_end is not None:
                if math.isnan(s) or s < prev_end:
                    raise TraceError(f"{path}: device {device}: sessions overlap near start_s={s:g}")
                off_d.append(s - prev_end)  # a gap between two sessions: ended
                off_e.append(True)
            if math.isnan(e):  # online at the window's end: censored (and the last session)
                if not math.isnan(s):
                    on_d.append(w1 - s)
                    on_e.append(False)
                prev_end = None
                break
            if not math.isnan(s):
                on_d.append(e - s)
                on_e.append(True)
            prev_end = e
        if prev_end is not None and prev_end < w1:  # offline at the window's end
            off_d.append(w1 - prev_end)
            off_e.append(False)
    result = {}
    for cls, v in out.items():
        on_d, on_e, off_d, off_e = v["lists"]
        result[cls] = {
            "online": Spells(np.asarray(on_d, float), np.asarray(on_e, bool), resolution),
            "offline": Spells(np.asarray(off_d, float), np.asarray(off_e, bool), resolution),
        }
    return result


# ---------------------------------------------------------------------------------
# Maximum likelihood with right-censoring
# ---------------------------------------------------------------------------------


def _loglik(dist: str, theta: np.ndarray, sp: Spells) -> float:
    """Log-likelihood: log f(t) over ended spells, log S(t) over censored ones and
    log(1 - S(resolution)) over ended spells shorter than the trace's resolution.
    `theta` holds the log parameters (mu itself for the lognormal)."""
    from scipy.special import log_ndtr

    short = sp.short
    t, ev, cens = sp.duration, sp.ended & ~short, ~sp.ended
    r = sp.resolution
    if dist == "weibull":
        scale, shape = np.exp(theta)
        z = (t / scale) ** shape
        logf = math.log(shape / scale) + (shape - 1.0) * np.log(t[ev] / scale) - z[ev]
        log_short = math.log(-math.expm1(-((r / scale) ** shape))) if short.any() else 0.0
        return float(logf.sum() - z[cens].sum() + short.sum() * log_short)
    if dist == "lognormal":
        mu, sigma = theta[0], math.exp(theta[1])
        z = (np.log(np.maximum(t, 1e-300)) - mu) / sigma
        logf = -np.log(t[ev]) - math.log(sigma) - 0.5 * math.log(2.0 * math.pi) - 0.5 * z[ev] ** 2
        log_short = float(log_ndtr((math.log(r) - mu) / sigma)) if short.any() else 0.0
        return float(logf.sum() + log_ndtr(-z[cens]).sum() + short.sum() * log_short)
    if dist == "exponential":
        mean = math.exp(theta[0])
        log_short = math.log(-math.expm1(-r / mean)) if short.any() else 0.0
        return float(-ev.sum() * math.log(mean) - t[ev | cens].sum() / mean + short.sum() * log_short)
    raise ValueError(dist)


def _hessian(f, x: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """Central-difference Hessian of f at x (deterministic)."""
    n = len(x)
    H = np.empty((n, n))
    for i in range(n):
        for j in range(i, n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = H[j, i] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * h * h)
    return H


def _fit_smooth(dist: str, sp: Spells) -> LawFit:
    from scipy.optimize import minimize

    t_ev = sp.duration[sp.ended & ~sp.short]
    logs = np.log(t_ev)
    if dist == "exponential":
        theta0 = np.array([math.log(sp.duration.sum() / max(sp.events, 1))])
    elif dist == "weibull":
        theta0 = np.array([logs.mean() + 0.5, math.log(1.2 / max(logs.std(), 1e-3))])
    else:
        theta0 = np.array([logs.mean(), math.log(max(logs.std(), 1e-3))])
    nll = lambda th: -_loglik(dist, th, sp)  # noqa: E731
    res = minimize(nll, theta0, method="BFGS", options={"gtol": 1e-8, "maxiter": 500})
    theta = res.x
    cov = np.linalg.inv(_hessian(nll, theta))
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    keys = laws.PARAMETERS[dist]
    if dist == "lognormal":
        params = {"mu": float(theta[0]), "sigma": math.exp(theta[1])}
        se = {"mu": float(sd[0]), "sigma": math.exp(theta[1]) * float(sd[1])}
    else:  # log parameters: delta method
        params = {k: math.exp(v) for k, v in zip(keys, theta)}
        se = {k: params[k] * float(s) for k, s in zip(keys, sd)}
    ll = -nll(theta)
    return LawFit(dist, params, se, ll, 2 * len(keys) - 2 * ll)


def _fit_pareto(sp: Spells) -> LawFit:
    t, ev = sp.duration, sp.ended & ~sp.short
    scale = float(t[ev].min())  # the likelihood grows with the scale up to the shortest ended spell
    over = t >= scale
    n_ev = int(ev.sum())
    shape = n_ev / float(np.log(t[over] / scale).sum())
    logf = math.log(shape) + shape * math.log(scale) - (shape + 1.0) * np.log(t[ev])
    logs = shape * np.log(scale / t[~sp.ended & over])
    ll = float(logf.sum() + logs.sum())
    fit = LawFit("pareto", {"scale": scale, "shape": shape},
                 {"scale": math.nan, "shape": shape / math.sqrt(n_ev)}, ll, 4 - 2 * ll)
    if sp.short.any():  # a Pareto law gives no spell below its scale any probability
        fit.accepted, fit.loglik, fit.aic = False, -math.inf, math.inf
        fit.note = "spells shorter than the trace's resolution, which a Pareto law cannot give"
    elif shape <= 1.0:
        fit.accepted = False
        fit.note = "shape <= 1: infinite mean, no stationary start (the config refuses it)"
    return fit


def fit_spells(sp: Spells, candidates=CANDIDATES) -> list[LawFit]:
    """Every candidate law fitted to `sp`, best (smallest AIC) first."""
    if sp.events < MIN_EVENTS:
        raise TraceError(f"{sp.events} ended spells; at least {MIN_EVENTS} are needed to fit a law")
    if (sp.ended & (sp.duration <= 0) & ~sp.short).any():
        raise TraceError("a spell of zero length; give the trace's resolution_s in window.json")
    fits = [_fit_pareto(sp) if d == "pareto" else _fit_smooth(d, sp) for d in candidates]
    fits.sort(key=lambda f: (not f.accepted, f.aic))
    return fits


def fit_availability(folder: str | Path) -> list[ClassFit]:
    """Fit every class of the session trace in `folder` (see the module's docstring)."""
    df, window = read_sessions(folder)
    by_class = spells(df, window)
    n_all = df.device.nunique()
    out = []
    for cls in sorted(by_class):
        n = int(df.device[df["class"] == cls].nunique())
        cf = ClassFit(cls, n, n / n_all, by_class[cls])
        for state in STATES:
            try:
                cf.candidates[state] = fit_spells(by_class[cls][state])
            except TraceError as err:
                raise TraceError(f"{Path(folder) / SESSIONS}: class {cls}, {state}: {err}") from None
        out.append(cf)
    return out


def classes_config(fits: list[ClassFit]) -> dict:
    """The chosen laws as the config writes them, per class with its share of the devices."""
    return {
        "classes": [
            {
                "name": cf.name,
                "share": round(cf.share, 6),
                "availability": {s: cf.chosen(s).config() for s in STATES},
            }
            for cf in fits
        ]
    }


# ---------------------------------------------------------------------------------
# Diagnostics: the fitted survival against Kaplan-Meier
# ---------------------------------------------------------------------------------


def kaplan_meier(sp: Spells) -> tuple[np.ndarray, np.ndarray]:
    """(times, S) of the Kaplan-Meier estimate, right-continuous steps at ended spells."""
    order = np.lexsort((~sp.ended, sp.duration))  # at a tie, ended before censored
    t, ev = sp.duration[order], sp.ended[order]
    at_risk = len(t) - np.arange(len(t))
    factors = np.where(ev, 1.0 - 1.0 / at_risk, 1.0)
    s = np.cumprod(factors)
    return t[ev], s[ev]


def write_report(fits: list[ClassFit], out_dir: Path, source: str) -> None:
    """`availability.md` (every candidate per class and state) and `availability.png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Availability laws (paper section 2.2), fitted per device class",
        "",
        f"Source: `{source}`. Left-truncated spells left out, open ones right-censored;",
        "the law with the smallest AIC among those the config accepts is chosen (first row).",
        "Standard errors from the observed information; a Pareto scale is a boundary estimate.",
        "",
    ]
    for cf in fits:
        lines += [f"## {cf.name}: {cf.devices} devices (share {cf.share:.3f})", ""]
        for state in STATES:
            sp = cf.spells[state]
            lines += [
                f"{state}: {len(sp.duration)} spells, {sp.events} ended",
                "",
                "| law | parameters (± se) | log-likelihood | ΔAIC | note |",
                "|---|---|---|---|---|",
            ]
            best = cf.candidates[state][0].aic
            for f in cf.candidates[state]:
                ps = ", ".join(f"{k} {v:.5g} ± {f.se[k]:.2g}" for k, v in f.params.items())
                lines.append(f"| {f.dist} | {ps} | {f.loglik:.1f} | {f.aic - best:.1f} | {f.note} |")
            lines.append("")
    lines += ["![survival against Kaplan-Meier](availability.png)", ""]
    (out_dir / "availability.md").write_text("\n".join(lines))

    fig, axes = plt.subplots(len(fits), 2, figsize=(9, 3.0 * len(fits)), squeeze=False)
    for row, cf in zip(axes, fits):
        for ax, state in zip(row, STATES):
            sp = cf.spells[state]
            t, s = kaplan_meier(sp)
            ax.step(t, s, where="post", color="black", label="data (Kaplan-Meier)")
            grid = np.geomspace(max(sp.duration.min(), 0.1), sp.duration.max(), 200)
            for f in cf.candidates[state][:3]:
                ax.plot(grid, laws.survival(f.law(), grid), label=f.dist)
            ax.set_xscale("log")
            ax.set_title(f"{cf.name}: {state}")
            ax.set_xlabel("duration (s)")
            ax.set_ylabel("P(duration > t)")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "availability.png", dpi=90)
    plt.close(fig)


__all__ = ["fit_availability", "classes_config", "read_sessions", "spells", "fit_spells",
           "kaplan_meier", "write_report", "Spells", "LawFit", "ClassFit"]
