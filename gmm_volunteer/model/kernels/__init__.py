"""Numba kernels over the flat state arrays (see gmm_volunteer/model/state.py)."""
