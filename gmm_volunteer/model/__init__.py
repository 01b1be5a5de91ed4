"""The generative Markov model (paper section 2): its constants and laws, random
streams, parameters and state arrays, the numba kernels of one 1 s step, the actions
policies take, the run config, the checks made before a run, and the engine that steps
it all (`engine.Simulation`, `engine.simulate`). Nothing here imports the experiment or
command-line layers."""
