# Two commands a new user needs: `make demo` and `make test`.
# Both create their own virtual environment from nothing but Python 3.11.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INSTALLED := $(VENV)/.installed-packages

.PHONY: demo test test-fast test-slow compile wheel bench experiments autoscale-experiment clean clean-cache

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(INSTALLED)

$(STAMP): $(INSTALLED)
	# Compile the demo's kernels now, into numba's cache, so that the first run loads them.
	$(BIN)/gmmv compile configs/quickstart.yaml
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gmmv run configs/quickstart.yaml --force
	$(BIN)/gmmv summarize results/quickstart.zarr

# Fill the kernel cache again (after clean-cache, or an edit of the kernels).
compile: $(STAMP)
	$(BIN)/gmmv compile configs/quickstart.yaml

# The wheel in dist/, carrying numba's kernel cache of the quickstart compiled on this
# machine (setup.py), so that its first run after `pip install` here loads the kernels.
# The build compiles them in the built package, so the wheel needs the installed packages
# only: on $(STAMP) it compiled them twice, the second time in the build.
wheel: $(INSTALLED)
	rm -rf dist
	GMMV_KERNEL_CACHE_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m build --outdir dist

# On every core (pytest-xdist): each test file runs whole on one worker, and the
# controller compiles the quickstart's kernels once before the workers start; then the
# files marked serial (the docs pages, the wheel) in one process (tests/conftest.py).
XDIST := -n auto --dist loadgroup

test: $(STAMP)
	$(BIN)/pytest -q $(XDIST) -m 'not slow and not serial'
	$(BIN)/pytest -q -m 'not slow and serial'

# The inner loop: everything but the tests marked heavy (tests/conftest.py says which and
# why) and the slow ones; the README gives its time.
test-fast: $(STAMP)
	$(BIN)/pytest -q $(XDIST) -m 'not slow and not heavy'

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

# The reduced grid (72 short runs) and its HTML report: results/grid_small/report.html
experiments: $(STAMP)
	$(BIN)/gmmv sweep configs/grid_small.yaml
	$(BIN)/gmmv report results/grid_small -o results/grid_small/report.html

# The autoscaler comparison (a simulated day, 10,000 users, 4 autoscalers x 3 seeds) and
# its report: results/autoscalers/report.html (docs/experiments.md section 7)
autoscale-experiment: $(STAMP)
	$(BIN)/gmmv sweep configs/experiments/autoscalers.yaml
	$(BIN)/gmmv report results/autoscalers -o results/autoscalers/report.html

# The closed-network section needs the event-driven reference's SimPy (extra `bench`).
bench: $(STAMP)
	$(BIN)/python -c "import simpy" 2>/dev/null || $(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) results .pytest_cache

clean-cache:
	find gmm_volunteer -name '*.nbi' -delete -o -name '*.nbc' -delete
