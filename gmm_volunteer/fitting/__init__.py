"""Offline fitting of the model's stochastic components from measured traces.

Reads a traces folder (`traces/FORMAT.md`) and writes a model bundle
(`docs/formats.md`, section 1). The simulator never imports this package; the `gmmv`
CLI loads it lazily for `gmmv fit` and `gmmv collect`. Pipeline and choices:
`docs/fitting.md`.
"""
