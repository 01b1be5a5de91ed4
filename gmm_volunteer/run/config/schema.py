"""The run config as a whole (docs/usage.md): `RunConfig`, its sections, the policies
(paper 2.3) checked against their own options, and the model bundle's directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field, ValidationError, ValidationInfo, field_validator, model_serializer, model_validator,
)

from gmm_volunteer.model.demand import Demand
from gmm_volunteer.model.events import ScriptedEvent
from gmm_volunteer.run.config.laws import MAX_STEPS
from gmm_volunteer.run.config.messages import OptionsError
from gmm_volunteer.run.config.sections import (
    Allocation, Availability, BaseProfile, Execution, Output, Requests, Server, Users, _Section,
)

DEFAULT_MODEL = "models/default"
MAX_SERVERS = 64  # dedicated servers of one run (docs/model.md D35)
_FROM_SERVERS = object()  # `server` left out because `servers` lists them


class RunConfig(_Section):
    """One run of the simulator; see docs/usage.md for every key."""

    seed: int | None = Field(None, ge=0, lt=2**128)
    steps: int = Field(ge=1, le=MAX_STEPS)
    users: Users
    # One dedicated server (paper 2.1), or a list of them (docs/model.md D35). A config
    # gives one of the two; after validation `servers` always lists every server and
    # `server` is the first of them (the one the single-server parts of the model read).
    server: Server | None
    servers: list[Server] | None = None
    base_profile: BaseProfile = Field(default_factory=BaseProfile)
    scheduler: str = Field("uniform", validate_default=True)
    scheduler_options: dict[str, Any] = Field(default_factory=dict)
    executor: str = Field("default", validate_default=True)
    executor_options: dict[str, Any] = Field(default_factory=dict)
    autoscaler: str = Field("fixed", validate_default=True)  # dedicated capacity over time (D17)
    autoscaler_options: dict[str, Any] = Field(default_factory=dict)
    model: str = DEFAULT_MODEL
    availability: Availability = Field(default_factory=Availability)
    requests: Requests = Field(default_factory=Requests)
    allocation: Allocation = Field(default_factory=Allocation)
    execution: Execution = Field(default_factory=Execution)
    demand: Demand = Field(default_factory=Demand)  # time-varying demand (D18)
    events: list[ScriptedEvent] = Field(default_factory=list)  # scripted perturbations (D25)
    output: Output = Field(default_factory=Output)

    @model_validator(mode="before")
    @classmethod
    def _server_from_servers(cls, data: Any) -> Any:
        if isinstance(data, dict) and "servers" in data and "server" not in data:
            data = {**data, "server": _FROM_SERVERS}
        return data

    @field_validator("server", mode="before")
    @classmethod
    def _server_given(cls, v: Any) -> Any:
        if v is _FROM_SERVERS:
            return None
        if v is None:  # null would read as "no server"; a run has at least one
            raise ValueError("must be a mapping of server keys (got null)")
        return v

    @field_validator("servers")
    @classmethod
    def _server_list(cls, v: list[Server] | None, info: ValidationInfo) -> list[Server] | None:
        if v is None:
            raise ValueError("must be a list of servers (got null; leave the key out for the one `server:`)")
        if info.data.get("server") is not None:
            raise ValueError("give either `server:` (one dedicated server) or `servers:` (a list), not both")
        if not 1 <= len(v) <= MAX_SERVERS:
            raise ValueError(f"must list 1 to {MAX_SERVERS} servers (got {len(v)})")
        seen: dict[str, int] = {}
        for i, s in enumerate(v):
            if s.name in seen:
                raise ValueError(f"entry {i}: name {s.name!r} is also the name of entry {seen[s.name]}; "
                                 "every server needs its own name")
            seen[s.name] = i
        return v

    @field_validator("scheduler", "executor", "autoscaler")
    @classmethod
    def _known_policy(cls, v: str, info: ValidationInfo) -> str:
        from gmm_volunteer.policies.registry import policy_class, resolve

        resolve(info.field_name, v)  # raises UnknownPolicyError, a ValueError
        servers = info.data.get("servers") or [info.data.get("server")]
        per_resource = [s.name for s in servers if s is not None and s.per_resource()]
        if info.field_name == "autoscaler" and per_resource:
            policy = policy_class("autoscaler", v)
            if policy is not None and getattr(policy, "scales", False):
                # A scaling autoscaler adds replicas of base_profile (D17); a server
                # sized per resource is not a whole number of them (D20).
                raise ValueError(
                    f"{v!r} scales the server in units of base_profile; it cannot be combined "
                    "with server.resource_capacity or server.max_allocation (use autoscaler: fixed)")
        return v

    @model_validator(mode="after")
    def _one_list_of_servers(self):
        if self.servers is None:
            self.servers = [self.server]
        if self.server is None:
            self.server = self.servers[0]
        return self

    @model_serializer(mode="wrap")
    def _servers_once(self, handler):
        # One server dumps as `server:`, however it was written, so that a config with
        # one entry in `servers:` and the same config with `server:` resolve (and store)
        # alike; several dump as `servers:` (docs/model.md D35).
        d = handler(self)
        if len(self.servers) == 1:
            d.pop("servers", None)
        else:
            d.pop("server", None)
        return d

    def server_names(self) -> list[str]:
        """The servers' names, in the order of their nodes (docs/model.md D35)."""
        return [s.name for s in self.servers]

    def server_named(self, name: str | None) -> Server:
        """The server called `name`; the first one for None (docs/model.md D35)."""
        if name is None:
            return self.servers[0]
        return self.servers[self.server_names().index(name)]

    @field_validator("scheduler_options", "executor_options", "autoscaler_options")
    @classmethod
    def _policy_options(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # Checked against the named policy's own Options model now, so that a typo fails
        # when the config loads (naming the key), not mid-run or on a Dask worker.
        from gmm_volunteer.policies.registry import policy_class

        kind = info.field_name.removesuffix("_options")
        name = info.data.get(kind)
        if name is None:  # the name itself was invalid: reported already
            return v
        policy = policy_class(kind, name)
        if policy is not None:
            try:
                validated = policy.validate_options(v)
            except ValidationError as exc:
                raise OptionsError(exc, v, policy.Options) from None
            from gmm_volunteer.policies.bounds import option_bound_problems

            problems = option_bound_problems(validated.model_dump(mode="python"))
            if problems:
                raise ValueError("; ".join(problems))
            scaled = getattr(validated, "server", None)
            names = [s.name for s in (info.data.get("servers") or [info.data.get("server")]) if s is not None]
            if kind == "autoscaler" and scaled is not None and names and scaled not in names:
                raise ValueError(f"server: {scaled!r} is not a server of this config (servers: "
                                 f"{', '.join(names)})")
        return v

    @model_validator(mode="after")
    def _events_fit_users(self):
        from gmm_volunteer.model.events import check_events

        check_events(self.events, self.users.count)  # names events.<i>.<key>
        return self

    @field_validator("model")
    @classmethod
    def _bundle_dir(cls, v: str) -> str:
        path = Path(v)
        if not path.is_absolute():
            # config_from_dict resolves relative paths first; this only guards direct use.
            path = Path.cwd() / path
        if not path.is_dir():
            raise ValueError(f"model bundle directory does not exist: {path}")
        if not (path / "bundle.yaml").is_file():
            raise ValueError(f"model bundle directory has no bundle.yaml: {path}")
        return str(path)

    def to_yaml(self) -> str:
        """The resolved config (every default filled in) as YAML text."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def output_path(self, config_path: str | Path | None = None) -> Path:
        """Where the result store goes: ``output.path`` or the default for the file."""
        if self.output.path is not None:
            return Path(self.output.path)
        return default_output_path(config_path)


def default_output_path(config_path: str | Path | None) -> Path:
    """``results/<config file stem>.zarr``, relative to the current directory."""
    stem = Path(config_path).stem if config_path is not None else "run"
    return Path("results") / f"{stem}.zarr"
