"""The `gmmv` command line (docs/usage.md): core commands (`commands`: run, validate,
summarize; `main` is the console script), experiment commands (`experiments`: sweep,
combine, report, capacity) and what every command tells the user (`feedback`).
`gmmv fit` and `gmmv collect` come from `gmm_volunteer.fitting.cli`.
"""
