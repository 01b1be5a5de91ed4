"""Model bundle: what a fitted model holds (docs/formats.md, section 1; paper 2.1-2.2).

The schema of the fitted parameters the simulator reads: allocation ARMAs, consumption
statistics, memory and work models, the hazard models of the phases, and the request
and subtask types, with the cross-checks between them. Validation happens when a bundle
is read from its files (by io) or written, so that a bad bundle fails before a
run starts, with a message naming the file and the key. A bundle's digest identifies the
model it holds, whatever file it came from.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gmm_volunteer.model.constants import CONSUMPTION_RESOURCES, PHASES, RESOURCES

FORMAT = "gmmv-model-bundle"
FORMAT_VERSION = 2  # 2: subtask types carry a work model (0.3.0)
STAGES = ("data_download", "input_download", "execution", "upload")
# The resource whose consumption makes each stage progress (docs/model.md): a bundle
# whose stage lacks it would leave that phase unfinished forever.
PROGRESS_RESOURCE = {"data_download": "band_in", "input_download": "band_in",
                     "execution": "cpu", "upload": "band_out"}
MAX_SIZE_MB = 1e9  # sizes and memory, MB
MAX_LOG_SD = 10.0
# Consumption statistics (%, MB, Mbit/s), allocation and transform parameters: far above
# any measurement, far below what overflows the float32 series a run writes (3.4e38).
MAX_STAT = 1e9
MAX_IDW_POWER = 100.0  # distance ** power of levels ratios: 1e300 overflows to inf
MAX_YJ_LAMBDA = 100.0


def _spectral_radius(coefs: list[float], sign: float) -> float:
    """Largest modulus of the roots of z^n + sign * (c_1 z^(n-1) + ... + c_n): below 1
    means a stationary AR (sign -1) or an invertible MA (sign +1)."""
    if not coefs or not any(coefs):
        return 0.0
    return float(np.max(np.abs(np.roots([1.0, *(sign * c for c in coefs)]))))


class BundleError(ValueError):
    """A model bundle that cannot be used; the message names the file and key."""


class _Strict(BaseModel):
    # Every number in a bundle is finite: NaN or inf would run silently into results.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Arma(_Strict):
    """An ARMA(p, q) block. The AR part must be stationary and the MA part invertible
    (every root of the characteristic polynomials inside the unit circle): a
    non-stationary AR makes the simulated series explode."""

    order: tuple[int, int]
    ar: list[float]
    ma: list[float]
    sigma: float = Field(ge=0, le=MAX_STAT)
    aic: float | None = Field(None, allow_inf_nan=True)
    # Diagnostics only (not read by the simulator): a failed candidate fit may be inf.
    aic_grid: dict[str, Annotated[float, Field(allow_inf_nan=True)]] | None = None

    @model_validator(mode="after")
    def _orders_match(self):
        p, q = self.order
        if p < 0 or q < 0:
            raise ValueError(f"order {list(self.order)}: p and q must be >= 0")
        if len(self.ar) != p or len(self.ma) != q:
            raise ValueError(f"order {list(self.order)} does not match len(ar)={len(self.ar)}, len(ma)={len(self.ma)}")
        r = _spectral_radius(self.ar, -1.0)
        if not r < 1.0:
            raise ValueError(f"ar: not stationary (a root of the AR polynomial has modulus {r:.6g} >= 1)")
        r = _spectral_radius(self.ma, 1.0)
        if not r < 1.0:
            raise ValueError(f"ma: not invertible (a root of the MA polynomial has modulus {r:.6g} >= 1)")
        return self


class YeoJohnson(_Strict):
    lam: float = Field(ge=-MAX_YJ_LAMBDA, le=MAX_YJ_LAMBDA)
    z_mean: float = Field(0.0, ge=-MAX_STAT, le=MAX_STAT)
    z_sd: float = Field(1.0, gt=0, le=MAX_STAT)


class AllocationModel(_Strict):
    arma: Arma
    yeo_johnson: YeoJohnson
    mean: float = Field(ge=-MAX_STAT, le=MAX_STAT)
    sd: float = Field(ge=0, le=MAX_STAT)


class Memory(_Strict):
    batch_sizes: list[int]
    execution_mb: list[float]
    download_mb: float = Field(ge=0, le=MAX_SIZE_MB)

    @model_validator(mode="after")
    def _lengths(self):
        if len(self.batch_sizes) != len(self.execution_mb) or not self.batch_sizes:
            raise ValueError("batch_sizes and execution_mb must be non-empty and of equal length")
        if sorted(set(self.batch_sizes)) != list(self.batch_sizes) or self.batch_sizes[0] < 1:
            raise ValueError("batch_sizes must be strictly increasing and >= 1")
        if any(not 0 <= m <= MAX_SIZE_MB for m in self.execution_mb):
            raise ValueError(f"execution_mb must be >= 0 and <= {MAX_SIZE_MB:g}")
        return self


# A volunteer's batch at most this many times the server's work (D29)
MAX_VOLUNTEER_FACTOR = 100.0
MAX_CPU_PCT = 1e6  # a volunteer factor table's CPU maximum, % of a core

VolunteerFactor = Annotated[float, Field(gt=0, le=MAX_VOLUNTEER_FACTOR)]


class Work(_Strict):
    """CPU-seconds a batch's execution needs (docs/model.md, "Progress from granted
    resources"; refines paper 2.2, "Execution").

    `mean_cpu_s[i]` is the mean work of a batch of `batch_sizes[i]` subtasks; a batch's
    work is that mean times a factor of mean 1 drawn when it starts executing:
    lognormal with log-sd `log_sd`, or exponential (for checks against queueing theory).

    The table is the work on the dedicated server. A batch executing on a volunteer needs
    `volunteer_factor` times it (docs/model.md D29): a volunteer's process runs its batches
    colder than the server's, and a testbed measures the ratio from the batches its nodes
    list (the testbed's `batches --fit-volunteer`, docs/testbed.md). 1 = as on the server.
    It may instead be a table {the users' CPU maximum, % of a core: factor} (D29, "as a
    function of the CPU share"; the testbed's `quota` writes one): the
    factor at the run's users' maximum is read off it (`volunteer_factor_at`).
    """

    distribution: Literal["lognormal", "exponential"] = "lognormal"
    batch_sizes: list[int]
    mean_cpu_s: list[float]
    log_sd: float = Field(0.0, ge=0, le=MAX_LOG_SD)
    volunteer_factor: VolunteerFactor | dict[Annotated[float, Field(gt=0, le=MAX_CPU_PCT)], VolunteerFactor] = 1.0

    def volunteer_factor_at(self, cpu_pct: float) -> float:
        """The volunteer factor on users whose CPU maximum is `cpu_pct` % of a core: the
        number, or the table linear in log CPU between its entries and constant beyond them
        (D29: a quota's cost grows as the share shrinks, measured at a few shares)."""
        f = self.volunteer_factor
        if not isinstance(f, dict):
            return float(f)
        cpus = sorted(f)
        return float(np.interp(np.log(max(cpu_pct, 1e-12)), np.log(cpus), [f[c] for c in cpus]))

    @model_validator(mode="after")
    def _lengths(self):
        if len(self.batch_sizes) != len(self.mean_cpu_s) or not self.batch_sizes:
            raise ValueError("batch_sizes and mean_cpu_s must be non-empty and of equal length")
        if sorted(set(self.batch_sizes)) != list(self.batch_sizes) or self.batch_sizes[0] < 1:
            raise ValueError("batch_sizes must be strictly increasing and >= 1")
        if not all(0 < w < float("inf") for w in self.mean_cpu_s):
            raise ValueError("mean_cpu_s must be finite and > 0")
        if self.distribution == "exponential" and self.log_sd != 0.0:
            raise ValueError("log_sd applies to the lognormal distribution only")
        if isinstance(self.volunteer_factor, dict) and not self.volunteer_factor:
            raise ValueError("volunteer_factor: a table needs at least one entry {CPU %: factor}")
        return self


class SubtaskType(_Strict):
    name: str
    description: str = ""
    data_size_mb: float = Field(gt=0, le=MAX_SIZE_MB)
    input_size_mb: float = Field(ge=0, le=MAX_SIZE_MB)
    output_size_mb: float = Field(ge=0, le=MAX_SIZE_MB)
    memory: Memory
    work: Work
    # Model variants (issue 12 item 1; docs/formats.md): subtask types naming the same
    # `function` are functionally equivalent and may serve each other's slots; `accuracy`
    # is the variant's published quality (ImageNet top-1 as a fraction for classifiers).
    function: str | None = Field(None, min_length=1)
    accuracy: float | None = Field(None, gt=0, le=1)


class TaskType(_Strict):
    name: str
    subtasks: list[str] = Field(min_length=1)


class Stats(_Strict):
    mean: list[list[float]]
    sd: list[list[float]]

    @model_validator(mode="after")
    def _sd_not_negative(self):
        for i, row in enumerate(self.sd):
            for l, x in enumerate(row):
                if x < 0:
                    raise ValueError(f"sd[{i}][{l}] must be >= 0 (got {x!r})")
        for name, rows in (("mean", self.mean), ("sd", self.sd)):
            for i, row in enumerate(rows):
                for l, x in enumerate(row):
                    if abs(x) > MAX_STAT:
                        raise ValueError(f"{name}[{i}][{l}] must be within +-{MAX_STAT:g} (got {x!r})")
        return self


class ConsumptionResource(_Strict):
    arma: Arma
    yeo_johnson: YeoJohnson
    stats: Stats


class Stage(_Strict):
    level: Literal["batch_size", "band_in", "band_out"]
    levels: list[float] = Field(min_length=1)
    resources: dict[Literal[CONSUMPTION_RESOURCES], ConsumptionResource]

    @model_validator(mode="after")
    def _levels(self):
        lv = self.levels
        if any(b <= a for a, b in zip(lv, lv[1:])):
            raise ValueError(f"levels must be strictly increasing (sorted, no repeats): {lv}")
        if lv[0] <= 0:
            raise ValueError(f"levels must be > 0 (got {lv[0]!r})")
        return self


class Consumption(_Strict):
    idw_power: float = Field(2.0, gt=0, le=MAX_IDW_POWER)
    stages: dict[Literal[STAGES], Stage]

    @model_validator(mode="after")
    def _all_stages(self):
        missing = [s for s in STAGES if s not in self.stages]
        if missing:
            raise ValueError(f"missing stages: {missing}")
        return self


class HazardPhase(_Strict):
    consumption_resource: Literal[CONSUMPTION_RESOURCES]
    # docs/model.md D32: the covariates (paper: c, n, log(age + 1); work_fraction: log of the
    # step's fraction of the work W_m(n), n, log of the fraction done), the link, n or log n
    form: Literal["paper", "work_fraction"] = "paper"
    link: Literal["logit", "cloglog"] = "logit"
    batch_size_scale: Literal["raw", "log"] = "raw"
    covariate_mean: tuple[float, float, float]
    covariate_sd: tuple[float, float, float]
    terms: list[tuple[int, int, int]]
    coef: list[float]
    intercept: float
    type_coef: list[float]
    # per subtask type, its deviation from each term's coefficient (None: none)
    type_terms: list[list[float]] | None = None
    aic: float | None = None

    @model_validator(mode="after")
    def _shapes(self):
        if len(self.terms) != len(self.coef):
            raise ValueError(f"{len(self.terms)} terms but {len(self.coef)} coef")
        if self.type_terms is not None and (len(self.type_terms) != len(self.type_coef)
                                            or any(len(r) != len(self.terms) for r in self.type_terms)):
            raise ValueError(f"type_terms must have one row per type_coef ({len(self.type_coef)}) "
                             f"of one value per term ({len(self.terms)})")
        if any(s <= 0 for s in self.covariate_sd):
            raise ValueError("covariate_sd must be > 0")
        for i, t in enumerate(self.terms):
            if any(e < 0 for e in t) or sum(t) < 1:
                raise ValueError(f"terms[{i}] = {list(t)}: exponents must be >= 0 with a total >= 1")
        return self


class Hazard(_Strict):
    degree: int = Field(ge=1, le=3)
    phases: dict[Literal[PHASES], HazardPhase]

    @model_validator(mode="after")
    def _within_degree(self):
        for name, ph in self.phases.items():
            for i, t in enumerate(ph.terms):
                if sum(t) > self.degree:
                    raise ValueError(f"phases.{name}.terms[{i}] = {list(t)}: total degree "
                                     f"{sum(t)} exceeds the bundle's degree {self.degree}")
        return self


class Bundle(_Strict):
    format: Literal["gmmv-model-bundle"]
    format_version: Literal[2]
    provisional: bool
    created: str = ""
    provenance: str = ""
    resources: list[str]
    allocation: dict[Literal[RESOURCES], AllocationModel]
    subtask_types: list[SubtaskType] = Field(min_length=1)
    task_types: list[TaskType] = Field(min_length=1)
    consumption: Consumption
    # Fitted phase hazards: they end the phases under execution.progress: paper (D27); under
    # the default work law a diagnostic of the traces (docs/model.md D10).
    hazard: Hazard | None = None
    derived_base_profile: dict[str, float] | None = None

    @model_validator(mode="after")
    def _cross_checks(self):
        if list(self.resources) != list(RESOURCES):
            raise ValueError(f"resources must be {list(RESOURCES)}")
        missing = [r for r in RESOURCES if r not in self.allocation]
        if missing:
            raise ValueError(f"allocation: missing resources {missing}")
        names = [s.name for s in self.subtask_types]
        if len(set(names)) != len(names):
            raise ValueError("subtask_types: duplicate names")
        # Request types are an index of the result store (``request_type``): a name twice
        # would make ``ds.sel(request_type=name)`` return two rows.
        seen: dict[str, int] = {}
        for k, task in enumerate(self.task_types):
            if task.name in seen:
                raise ValueError(f"task_types.{k}.name: {task.name!r} is the name of task_types."
                                 f"{seen[task.name]} too; request type names must be unique")
            seen[task.name] = k
        for k, task in enumerate(self.task_types):
            for p, s in enumerate(task.subtasks):
                if s not in names:
                    from gmm_volunteer.model.suggest import did_you_mean

                    raise ValueError(f"task_types.{k}.subtasks.{p}: unknown subtask type {s!r}"
                                     + did_you_mean(s, names))
        for m, st in enumerate(self.subtask_types):
            peers = [o for o in self.subtask_types if st.function is not None and o.function == st.function]
            if len(peers) > 1 and st.accuracy is None:
                raise ValueError(f"subtask_types.{m}.accuracy: required for {st.name!r}, a variant of "
                                 f"function {st.function!r} (shared with "
                                 f"{', '.join(repr(o.name) for o in peers if o is not st)})")
        n_types = len(names)
        for sname, res in PROGRESS_RESOURCE.items():
            if res not in self.consumption.stages[sname].resources:
                raise ValueError(f"consumption.stages.{sname}.resources.{res}: missing (the "
                                 f"{sname} stage progresses by its {res} consumption)")
        for sname, stage in self.consumption.stages.items():
            for rname, res in stage.resources.items():
                for which in ("mean", "sd"):
                    table = getattr(res.stats, which)
                    where = f"consumption.stages.{sname}.resources.{rname}.stats.{which}"
                    if len(table) != n_types or any(len(row) != len(stage.levels) for row in table):
                        raise ValueError(f"{where}: must be [{n_types} subtask types][{len(stage.levels)} levels]")
        for pname, ph in (self.hazard.phases.items() if self.hazard is not None else ()):
            if len(ph.type_coef) != n_types:
                raise ValueError(f"hazard.phases.{pname}.type_coef: need {n_types} values")
        return self


# pydantic's names of union members in an error's location (``constrained-float``,
# ``dict[constrained-float,constrained-float]``): its internals, not keys of the file.
_MEMBER = re.compile(r"^(constrained-[a-z]+|[a-z_-]+\[.*\]|int|float|str|bool)$")


def _readable(errors: list[dict]) -> list[dict]:
    """`errors` with the keys of the file as locations: union members' names left out,
    a dict key's own error said as such, and of a value that is a number or a table (the
    volunteer factor) only the errors of the form the file used."""
    out = []
    for e in errors:
        loc, key = [], False
        for x in e["loc"]:
            if x == "[key]":
                key = True
            elif not (isinstance(x, str) and _MEMBER.match(x)):
                loc.append(x)  # an index stays a number: the suggestion walks the schema by it
        msg = e["msg"].removeprefix("Value error, ")
        if key:
            msg = f"the key {loc[-1]!r}: {msg}"
            loc = loc[:-1]
        out.append({**e, "loc": tuple(loc), "msg": msg})
    deeper = {e["loc"][:n] for e in out for n in range(len(e["loc"]))}
    other = {e["loc"] for e in out if e["type"] not in ("dict_type", "list_type")}
    return [e for e in out
            if not (e["type"] in ("float_type", "int_type") and e["loc"] in deeper)  # a table was given
            and not (e["type"] in ("dict_type", "list_type") and e["loc"] in other)]  # a number was given


def _format_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in _readable(err.errors())[:5]:
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"]
        if e["type"] == "finite_number":
            msg = f"must be a finite number (got {e.get('input')!r})"
        msg += _suggestion(e)
        if loc:
            lines.append(f"{source}: {loc}: {msg}")
        elif ": " in msg and " " not in msg.split(": ", 1)[0]:  # the message names its key
            lines.append(f"{source}: {msg}")
        else:
            lines.append(f"{source}: (top level): {msg}")
    return "\n".join(lines)


def _suggestion(e: dict) -> str:
    """A close name for an unknown key or a misspelt name (e.g. a resource), or ""."""
    from gmm_volunteer.model.suggest import did_you_mean, known_keys, quoted_choices

    if e["type"] == "extra_forbidden":
        return did_you_mean(e["loc"][-1], known_keys(Bundle, e["loc"]))
    if e["type"] == "literal_error":
        return did_you_mean(e.get("input"), quoted_choices((e.get("ctx") or {}).get("expected", "")))
    return ""


def validate_bundle(data: dict, source: str = "<bundle>") -> Bundle:
    """Validate a bundle dict; raise `BundleError` naming `source` and the key."""
    if not isinstance(data, dict):
        raise BundleError(f"{source}: a bundle must be a mapping at the top level")
    if data.get("format_version") == 1:
        raise BundleError(
            f"{source}: format_version 1 has no work model (needed since gmm-volunteer 0.3.0, "
            "where phases progress by the resources granted); refit it with `gmmv fit TRACES -o DIR`"
        )
    try:
        return Bundle.model_validate(data)
    except ValidationError as err:
        raise BundleError(_format_error(err, source)) from None


# Keys that describe a fit rather than the model: when it ran (`created`, the clock of the
# fit unless SOURCE_DATE_EPOCH is set) and from what (`provenance`, which names the traces
# path as typed: `gmmv fit traces` and `gmmv fit traces/` write two texts). No run reads
# them, so the digest leaves them out: two fits of the same traces have one digest.
DESCRIPTIVE_KEYS = ("created", "provenance")
HAZARD_KEY_DEFAULTS = {"form": "paper", "link": "logit", "batch_size_scale": "raw", "type_terms": None}


def _sha256_json(data: dict) -> str:
    import hashlib
    import json

    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _content(bundle: Bundle, **dump) -> dict:
    """The bundle as the digests read it: its JSON dump, without a subtask type's
    `work.volunteer_factor` where it is the default 1 (0.8.4, D29) nor a hazard phase's
    keys of 0.9.0 at their defaults (D32), so that every bundle written before the fields
    existed keeps the digest its stores recorded."""
    data = bundle.model_dump(mode="json", **dump)
    for s in data.get("subtask_types", []):
        if s["work"].get("volunteer_factor") == 1.0:
            del s["work"]["volunteer_factor"]
    # the hazard keys of 0.9.0 (D32) at the values that read a bundle as before them
    for ph in ((data.get("hazard") or {}).get("phases") or {}).values():
        for key, default in HAZARD_KEY_DEFAULTS.items():
            if key in ph and ph[key] == default:
                del ph[key]
    return data


def bundle_digest(bundle: Bundle) -> str:
    """SHA-256 of the validated bundle's content (canonical JSON) without its
    `DESCRIPTIVE_KEYS`: the same for the same model whatever its path, YAML layout, or
    the time and command line of the fit that made it. Run stores record it
    (`model_sha256`) so that a sweep can tell a store made with another model from one it
    can keep."""
    return _sha256_json(_content(bundle, exclude=set(DESCRIPTIVE_KEYS)))


def work_law_digest(bundle: Bundle) -> str:
    """The digest without the `hazard` block too: what runs under the default work law
    read (they never read the hazards, D10, D27), the same for two bundles that differ
    in their hazards alone (`resultfile.HAZARD_REFITS`)."""
    return _sha256_json(_content(bundle, exclude={*DESCRIPTIVE_KEYS, "hazard"}))


def legacy_bundle_digest(bundle: Bundle) -> str:
    """The digest 0.5.0 to 0.8.0 recorded: of the whole bundle, `DESCRIPTIVE_KEYS`
    included. Stores written then carry it (docs/formats.md)."""
    return _sha256_json(_content(bundle))


def accepted_digests(bundle: Bundle) -> tuple[str, str]:
    """The digests a store or checkpoint made with `bundle` may have recorded as its
    `model_sha256`: `bundle_digest`, or (0.8.0 and before) the legacy digest of this very
    bundle, which is the same content with stamp and provenance, so the same model."""
    return bundle_digest(bundle), legacy_bundle_digest(bundle)
