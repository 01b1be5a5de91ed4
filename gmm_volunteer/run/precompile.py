"""Compile a run config's kernels ahead of its first run (`gmmv compile`, docs/usage.md).

numba compiles a kernel the first time it is called and keeps the machine code in its
on-disk cache (next to the kernel's module in ``__pycache__``, or under
``NUMBA_CACHE_DIR``); the fused runner of a policy pair is a generated module in the
runner directory (`policies.runner.runner_dir`), cached the same way. A cold first run
of the demo spends about a minute compiling. `precompile` pays that once, at install:
it runs the config for a few steps, which calls every kernel the run calls at start-up
(the state and parameter packers, the initial state, the fused runner and everything it
calls, the run record), and numba writes them to the cache that a later run of the same
policies, from the same installation and with the same ``NUMBA_CACHE_DIR`` and
``GMMV_RUNNER_DIR``, loads instead of compiling.

Only argument types matter to numba, never values (`kernels.jit`), so the few steps
give the same compiled code as the full run. A kernel that only runs when something
happens later in a run (a pool growing, an autoscaler's action, a scripted event due
later than the steps run here) is compiled when it first runs, as before.
"""

from __future__ import annotations

from gmm_volunteer.model.kernels.compile_log import CompileLog

STEPS = 50  # steps run per config: enough to enter the fused runner and build the record
USERS = 200  # users per config when the config has no scripted events naming user ids


def compile_target(cfg):
    """`cfg` reduced to what compiles the same kernels quickly: at most `STEPS` steps,
    and at most `USERS` users unless scripted events name users (docs/model.md D25)."""
    update = {"steps": min(int(cfg.steps), STEPS)}
    if not cfg.events and cfg.users.count > USERS:
        update["users"] = cfg.users.model_copy(update={"count": USERS})
    return cfg.model_copy(update=update)


def precompile(cfg, on_compiled=None) -> CompileLog:
    """Run `compile_target(cfg)` and return the log of what numba compiled (empty when
    every kernel came from the cache). ``on_compiled(entry)`` sees each compilation."""
    from gmm_volunteer.run.engine import Simulation

    log = CompileLog(on_compiled)
    with log.listening():
        Simulation(compile_target(cfg)).run(progress=False)
    return log


def cache_dir() -> str:
    """Where numba keeps the compiled simulation kernels in this installation."""
    from gmm_volunteer.model.kernels.step import dynamics_step

    return str(dynamics_step._cache._cache_path)
