"""Names of the model's fixed sets and the integer codes kernels use for them: the one
definition that the config, the parameters, the kernels, the bundle reader and the
result store all read, so that a code always means the name it stands for.

A code is the position of its name in the tuple (`RESOURCES[CPU] == "cpu"`), derived
here from the names rather than written a second time.
"""

# Resources of a node (paper 2.1), in the order of every per-resource array.
RESOURCES = ("band_in", "band_out", "cpu", "memory", "storage")
BAND_IN, BAND_OUT, CPU, MEMORY, STORAGE = (RESOURCES.index(r) for r in
                                           ("band_in", "band_out", "cpu", "memory", "storage"))
N_RES = len(RESOURCES)
# Resources with a consumption model (paper 2.2); storage is accumulated downloads.
CONSUMPTION_RESOURCES = RESOURCES[:STORAGE]
N_CRES = len(CONSUMPTION_RESOURCES)
RESOURCE_UNITS = {"band_in": "Mbit/s", "band_out": "Mbit/s", "cpu": "%", "memory": "MB", "storage": "MB"}

# Run phase of a subtask on its node (paper 2.2, the execution block): not started,
# downloading its input, executing, uploading its result, finished. The middle three
# are the phases the traces measure and the hazard models (`PHASES`).
RUN_PHASES = ("idle", "download", "execution", "upload", "done")
IDLE, DOWNLOAD, EXECUTION, UPLOAD, DONE = (RUN_PHASES.index(p) for p in
                                           ("idle", "download", "execution", "upload", "done"))
PHASES = RUN_PHASES[DOWNLOAD:DONE]

# Readiness of a node for a subtask type (paper 2.2, r_t: empty, downloading its data,
# download paused while offline, ready).
READINESS = ("empty", "loading", "paused", "ready")
EMPTY, LOADING, PAUSED, READY = (READINESS.index(r) for r in ("empty", "loading", "paused", "ready"))

# Node classes of the per-class series: node 0 is the dedicated server (paper 2.1).
NODE_CLASSES = ("server", "user")

# Subtask events counted per step and node class (result variable `subtask_events`).
EVENTS = ("start", "complete", "abort", "reset", "cancel")
EV_START, EV_COMPLETE, EV_ABORT, EV_RESET, EV_CANCEL = (EVENTS.index(e) for e in
                                                        ("start", "complete", "abort", "reset", "cancel"))

# How a request ends (paper 2.2: completed, or abandoned when the user's patience runs
# out; dropped when its user goes offline).
OUTCOMES = ("completed", "abandoned", "dropped")
OUT_COMPLETED, OUT_ABANDONED, OUT_DROPPED = (OUTCOMES.index(o) for o in
                                             ("completed", "abandoned", "dropped"))

# Operations of a routing policy's monitor whose cost is recorded (docs/routing.md).
# score_update: seed 000 section 6.4, the PATCH calls that publish a pod's score
MONITOR_OPS = ("metric_read", "latency_probe", "label_update", "score_update")
OP_METRIC_READ, OP_LATENCY_PROBE, OP_LABEL_UPDATE, OP_SCORE_UPDATE = (
    MONITOR_OPS.index(o) for o in ("metric_read", "latency_probe", "label_update", "score_update"))

# Fields of a routing decision (docs/routing.md; the router's decision log, variable
# `decision` of a result store): step, node, tier, predictions (hybrid, model-only,
# queue-only) of the chosen tier's delay, realized delay, and (issue 34) the delay the
# router itself decided by (the Oracle's true delay, LA-IMR's model, JSQ-S's (queue + 1) /
# capacity in seconds; the hybrid, model-only or queue-only estimate for those routers;
# NaN for routers that predict none). Their CF units: the step is seconds since the run
# start, node and tier are codes.
DECISION_FIELDS = ("step", "node", "tier", "predicted", "predicted_model", "predicted_queue", "realized",
                   "predicted_router")
DECISION_FIELD_UNITS = ("s", "1", "1", "s", "s", "s", "s", "s")
# Issue 51: the routers that fit or apply seed 001's law per (subtask type, tier) (random,
# la_imr) log besides each decision's subtask type and the chosen tier's arrival rate per
# server as the router saw it (docs/model.md D41).
DECISION_FIELDS_LAW = DECISION_FIELDS + ("subtask_type", "rate_per_server")
DECISION_FIELD_UNITS_LAW = DECISION_FIELD_UNITS + ("1", "s-1")
