"""Run configuration: YAML file -> validated, typed models (docs/usage.md).

A run config names everything one trajectory of the generative model needs: the
population (paper section 2.1), the capacity multipliers applied to the base resource
profile (section 3.1), the policies (section 2.3), the model bundle with the fitted
components (section 2.2) and the parametric availability and request laws of
section 2.2. Every model forbids unknown keys and refuses strings where numbers are
expected; any problem raises `ConfigError` naming the file and the dotted key.

`--set a.b=c` overrides are applied to the raw YAML mapping before validation, so
they are checked exactly like keys written in the file.

This module loads a config; the schema is split by part, each module a few screens:
`laws` (duration laws and the numeric domains), `sections` (server, power models, base
profile, availability, requests, allocation, execution, output), `population` (users and
their device classes), `schema` (`RunConfig`
as a whole), `testbed` (the live testbed's section), `overrides` (`--set`) and
`messages` (the words of each error). Their public names are found here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from pydantic import ValidationError

from gmm_volunteer.model.errors import ConfigError  # the model's own checks raise it too
from gmm_volunteer.run.config.laws import (  # noqa: F401  (the schema's names, found here)
    DIST_NAMES, MAX_ALLOCATION_SD, MAX_BURN_IN, MAX_CAPACITY, MAX_CONCURRENCY, MAX_LOG_MU,
    MAX_LOG_SIGMA, MAX_PROFILE, MAX_REQUEST_TYPES, MAX_SECONDS, MAX_SHAPE, MAX_STEPS, MAX_USERS,
    MIN_SHAPE, Dist, Exponential, LogNormal, Never, Pareto, Weibull,
)
from gmm_volunteer.run.config.messages import format_errors, kind_of
from gmm_volunteer.run.config.overrides import apply_overrides, parse_override, schema_keys
from gmm_volunteer.run.config.schema import DEFAULT_MODEL, RunConfig, default_output_path
from gmm_volunteer.run.config.sections import (  # noqa: F401
    ALLOCATION_BASES, ALLOCATION_RESOURCES, Allocation, AllocationMeans, AllocationSds,
    Availability, BaseProfile, CostWeights, Execution, MaxAllocation, Output, Requests,
    Power, ResourceCapacity, Server, ServerAllocation, ServerAllocationLaw, ServerPower, UserAllocation,
    UserAllocationLaw, UserPower,
)
from gmm_volunteer.run.config.population import UserClass, Users  # noqa: F401

__all__ = [
    "ConfigError",
    "RunConfig",
    "Dist",
    "Weibull",
    "LogNormal",
    "Pareto",
    "Exponential",
    "Never",
    "load_config",
    "config_from_dict",
    "apply_overrides",
    "blame_overrides",
    "parse_override",
    "default_output_path",
    "schema_keys",
]


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a YAML run config, apply ``key=value`` overrides, validate.

    Relative ``model`` paths written in the file (or the default) resolve against the
    file's directory; relative ``model`` paths given as overrides resolve against the
    current directory.
    """
    from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

    source = str(path)
    try:
        path = Path(path)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: file not found") from None
    except (OSError, ValueError) as exc:  # a directory, no permission, a NUL byte in the name
        raise ConfigError(f"{source}: cannot read: {exc}") from None
    try:
        data = load_yaml(raw, source)
    except YAMLInputError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        raise ConfigError(f"{source}: file is empty (expected a mapping of config keys)")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping of config keys, got {kind_of(data)}")

    overrides = list(overrides)
    parsed = dict(parse_override(o, source) for o in overrides)
    # the live testbed's own section, read by `gmmv testbed` only; checked here with its
    # overrides, so that a typo (in the file or in a --set) fails for `gmmv run` too
    # (its keys are flat: `testbed.KEY=VALUE`, as `testbed.config.load_testbed` reads them)
    on_section = {k: v for k, v in parsed.items() if k.startswith("testbed.")}
    if "testbed" in data or on_section:
        data = dict(data)
        section = data.pop("testbed", None) or {}
        if isinstance(section, Mapping):
            section = {**section, **{k.removeprefix("testbed."): v for k, v in on_section.items()}}
        try:
            validate_testbed_section(section, source)
        except ConfigError as exc:
            raise ConfigError(blame_overrides(str(exc), source, overrides)) from None
        parsed = {k: v for k, v in parsed.items() if k not in on_section}
    try:
        if isinstance(parsed.get("model"), str):
            parsed["model"] = _absolute(parsed["model"], Path.cwd(), source)
        data = apply_overrides(data, parsed, source)
        return config_from_dict(data, source=source, base_dir=path.resolve().parent)
    except ConfigError as exc:
        raise ConfigError(blame_overrides(str(exc), source, overrides)) from None


def blame_overrides(text: str, source: str, overrides: list[str]) -> str:
    """`text` (lines ``<source>: <key>: <problem>``) with each problem at a key an
    override set (or inside it) attributed to that override first:
    ``--set steps=1e5 on run.yaml: steps: ...``, since the file is not where the bad
    value is (the rest of the line keeps its form)."""
    by_key = {}
    for o in overrides:
        by_key[o.partition("=")[0].strip()] = o
    lines = []
    for line in text.splitlines():
        rest = line.removeprefix(f"{source}: ")
        key = rest.split(": ", 1)[0]
        # the key itself, a key inside it, or the law or section it set a part of
        # (``--set availability.online.dist=foo``: the problem is at availability.online)
        blamed = next((o for k, o in by_key.items()
                       if key == k or key.startswith(k + ".") or (key and k.startswith(key + "."))), None)
        lines.append(f"--set {blamed} on {line}" if blamed is not None and rest != line else line)
    return "\n".join(lines)


def validate_testbed_section(section: Any, source: str = "<config>"):
    """The `testbed:` section (docs/testbed.md) as a `testbed.section.Testbed`; a
    ConfigError names ``testbed.<key>``."""
    from gmm_volunteer.run.config.testbed import SECTION, Testbed

    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: {SECTION}: must be a mapping of testbed keys, got {kind_of(section)}")
    try:
        return Testbed.model_validate(dict(section))
    except ValidationError as exc:
        text = format_errors(exc, dict(section), source, RunConfig)
        raise ConfigError(text.replace(f"{source}: ", f"{source}: {SECTION}.")) from None


def config_from_dict(
    d: Mapping[str, Any], source: str = "<dict>", base_dir: str | Path | None = None
) -> RunConfig:
    """Validate a config mapping; ``source`` names it in errors.

    A relative ``model`` path (or the default) resolves against ``base_dir``, the
    current directory when not given.
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f"{source}: top level must be a mapping of config keys, got {kind_of(d)}")
    data = dict(d)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    from gmm_volunteer.policies.plugin_path import unresolved  # module:Class beside the config

    problems = unresolved(data, Path(base_dir) if base_dir is not None else None)
    if problems:
        raise ConfigError("\n".join(f"{source}: {kind}: cannot import {name!r}: {why}" for kind, name, why in problems))
    model = data.get("model", DEFAULT_MODEL)
    if isinstance(model, str):
        data["model"] = _absolute(model, base, source)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, data, source, RunConfig)) from None


def _absolute(p: str, base: Path, source: str = "<config>") -> str:
    if "\0" in p:
        raise ConfigError(f"{source}: model: path contains a NUL byte ({p!r})")
    try:
        path = Path(p).expanduser()
    except RuntimeError as exc:  # ~nosuchuser
        raise ConfigError(f"{source}: model: cannot expand {p!r}: {exc}") from None
    if not path.is_absolute():
        path = base / path
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # e.g. a symlink loop
        raise ConfigError(f"{source}: model: cannot resolve {p!r}: {exc}") from None
    if not resolved.is_dir():
        # Nothing there: a bare name (or the key left out) names a bundle shipped with the
        # package, so that a config outside the repository runs (docs/usage.md, "model").
        from gmm_volunteer.io.bundlefiles import packaged_bundle

        packaged = packaged_bundle("default" if p == DEFAULT_MODEL else p)
        if packaged is not None:
            return str(packaged)
    return str(resolved)
