"""Benchmarks of the simulator: `python -m benchmarks.run` (or `make bench`).

Each timed run happens in a fresh child process (`python -m benchmarks.one`) so that peak
resident memory and start-up are measured per run; `python -m benchmarks.compare A B`
compares two result files. See benchmarks/README.md.
"""
