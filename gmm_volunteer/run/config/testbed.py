"""The `testbed:` section of a run config (docs/testbed.md, "Config"): keys only the live
testbed reads. A leaf module, so that the run config's loader can check the section
(`run.config.validate_testbed_section`) without importing the testbed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SECTION = "testbed"


class Testbed(BaseModel):
    """Keys of the `testbed:` section."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    # One-way delay added by `tc netem` on each volunteer's link, ms (0: none).
    link_delay_ms: float = Field(0.0, ge=0.0, le=10_000.0)
    # Inputs generated per subtask type at start-up; requests cycle through them.
    inputs_per_type: int = Field(4, ge=1, le=1000)
    # Intra-op threads of the server's ONNX Runtime sessions; 0: one per whole core of
    # its CPU quota (at least 1).
    server_threads: int = Field(0, ge=0, le=64)
    # Seconds to wait for every process to be up before step 0 (imports under a small
    # CPU quota are slow).
    startup_timeout_s: float = Field(180.0, gt=0.0, le=3600.0)
    # Private /16 for the volunteers' links, as "a.b"; volunteer i gets a.b.(i>>6).(4*(i&63)+1..2).
    # null: the first of 10.231 ... 10.254 with no address on this machine, so that
    # testbeds running at once never share addresses.
    subnet: str | None = Field(None, pattern=r"^(10\.\d{1,3}|192\.168|172\.(1[6-9]|2\d|3[01]))$")
    # How a node runs the batches placed on it: "serial", one at a time in placement order
    # (a runtime with one worker); "shared", all at once, sharing the node's CPU quota by
    # the kernel's scheduler (the model's processor sharing, docs/model.md).
    execution: Literal["serial", "shared"] = "serial"
    # Each node's memory limit: "added", the config's memory (what the node offers its
    # batches, as in the model) plus the process's own footprint (interpreter, runtime,
    # the server's loaded sessions), measured once every process is up; "none", the
    # config's memory alone (the runs before 0.8.1, where the footprint ate into it).
    footprint: Literal["added", "none"] = "added"
    # The ONNX Runtime sessions a volunteer keeps between batches: "fit", while they fit:
    # before a batch runs, the idle sessions of other models are released (and the heap
    # trimmed) if what the process holds above its start plus the batch's memory estimate
    # would exceed the node's memory, since that estimate was measured on a worker holding
    # one session; the heap is trimmed after each batch, as between the collector's runs;
    # "kept", every session loaded stays (the runs before 0.8.2, where idle sessions sat
    # on top of the running batch's estimate).
    sessions: Literal["fit", "kept"] = "fit"
    # Where the users' draws come from (docs/testbed.md, "Draws"): "keyed", the simulator's
    # own draws for the run's seed (each user's stationary start, its n-th online and
    # offline period, think time, request type and patience), so that a testbed run and
    # the simulator's run of the same seed see the same users and `testbed.compare` can
    # pair them; "own", streams of the testbed's own (the runs before 0.8.5).
    draws: Literal["keyed", "own"] = "keyed"
    # glibc's mmap threshold in every node process, KB: a buffer at least this large gets
    # a mapping of its own, returned whole when freed, and the threshold stays fixed; 0:
    # glibc's dynamic threshold (the runs before 0.8.8), which rises to each large buffer
    # freed, so that a batch's next tensors come from the heap and its peak rises above
    # what it holds live, past its memory estimate (docs/testbed.md, "Memory").
    mmap_threshold_kb: int = Field(4096, ge=0, le=32768)
    # Where models, inputs and logs of the run go; null: a fresh temporary directory.
    workdir: str | None = None
