"""A live testbed of the model (docs/testbed.md): on one machine, a real server process,
one real process per user device with kernel-enforced limits (cgroups for CPU and memory,
a network namespace and a `tc`-shaped veth pair for its link), real model files and ONNX
inference, users with think time and patience (paper section 2). `gmmv testbed CONFIG`
runs it from a `gmmv run` config plus a `testbed:` section and writes the same result
store, so the simulator's prediction can be compared with what the live system does.

Modules: config (the section and what a live run accepts), isolation (cgroups, links),
clock (the shared step clock), placement (the centralized and uniform rules on live
state), server, device (user and volunteer), run (the orchestrator), compare (the
simulator's error against it), calibrate (one-thread work), limits (a node's limits for
`gmmv collect --testbed`), cli.
"""
