"""Step speed of the Gymnasium environment gmm_volunteer/Scheduling-v0 (docs/optimisation.md).

    python -m benchmarks.env_speed [--episodes 3] [--k 60] [--vector 4]

Random actions on the default config (configs/scheduling_env.yaml); a first episode
compiles or loads the kernels and is not timed. Reports environment steps/s and
simulated steps/s, with resets (and their warm-up steps) counted in the time, and the
same for a SyncVectorEnv over --vector seeds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gmm_volunteer.optimisation.env import SchedulingEnv, make_vector_env


def _episodes(env, n, rng, first_seed):
    steps = sim_steps = 0
    for e in range(n):
        env.reset(seed=first_seed + e)
        while True:
            _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4))
            steps += 1
            if term or trunc:
                break
        sim_steps += env.sim.t  # warm-up included: it is simulated work of the episode
    return steps, sim_steps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--k", type=int, default=60)
    ap.add_argument("--vector", type=int, default=4)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    env = SchedulingEnv(k=a.k)
    _episodes(env, 1, rng, 1000)  # compile / load
    t0 = time.perf_counter()
    steps, sim_steps = _episodes(env, a.episodes, rng, 0)
    dt = time.perf_counter() - t0
    print(f"single env: {a.episodes} episodes, {steps} env steps, {sim_steps} simulated steps in {dt:.2f} s: "
          f"{steps / dt:.1f} env steps/s, {sim_steps / dt:.0f} simulated steps/s")
    if a.vector > 1:
        envs = make_vector_env(a.vector, k=a.k)
        envs.reset(seed=list(range(a.vector)))
        n = (env.cfg.steps - env.warmup) // a.k
        t0 = time.perf_counter()
        envs.reset(seed=list(range(a.vector)))
        for _ in range(n):
            envs.step(rng.uniform(-1, 1, (a.vector, 4)))
        dt = time.perf_counter() - t0
        print(f"SyncVectorEnv x{a.vector}: {n} vector steps ({n * a.vector} env steps, "
              f"{a.vector * env.cfg.steps} simulated steps) in {dt:.2f} s: {n * a.vector / dt:.1f} env steps/s, "
              f"{a.vector * env.cfg.steps / dt:.0f} simulated steps/s")


if __name__ == "__main__":
    main()
