"""The generative Markov model (paper section 2), the package's ground floor: its
constants and laws, random streams, the bundle's schema (what a fitted model holds),
parameters and state arrays, the numba kernels of one 1 s step, the actions policies
take, the limits of the state's representation and the queueing results it is checked
against. Nothing here imports another layer of the package (docs/api.md, "Module map";
tests/test_layout.py checks it): io stores what the model defines, policies decide on
its state, and the run layer (`gmm_volunteer.run`) binds a config, a bundle and
policies into a `Simulation`."""
