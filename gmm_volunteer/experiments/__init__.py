"""Experiments over many runs (paper section 3): per-run statistics (`summary`), sweeps
(`sweep`) and their combined dataset (`combine`), the analysis accessor (`analysis`),
the paper's figures and findings (`figures`, `findings`), the HTML report (`report`)
and the capacity search (`capacity`)."""
