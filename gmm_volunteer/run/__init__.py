"""The run layer, above the model, io and policies (docs/api.md, "Module map"): the run
config's schema and loading (`config`), the engine that binds a config, a model bundle
and its policies into a `Simulation` and steps it (`engine.Simulation`,
`engine.simulate`), checkpoints of a run (`checkpoint`), the checks made before a run
(`preflight`) and compiling a config's kernels ahead of its first run (`precompile`)."""
