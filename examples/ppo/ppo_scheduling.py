"""A short PPO baseline on gmm_volunteer/Scheduling-v0 (docs/optimisation.md, "PPO baseline").

    pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu   # the CPU wheel
    pip install 'gmm-volunteer[ppo]'          # stable-baselines3 (+ that torch)
    python examples/ppo/ppo_scheduling.py --timesteps 3000 [--tuned results/tune.json]

Trains PPO (stable-baselines3, MLP policy) on a DummyVecEnv over training seeds for
`--timesteps` environment steps (k = 60 simulated steps each), with the reward scaled by
a running estimate of its spread (VecNormalize; the observations are already in [0, 10]).
Then it runs the deterministic policy on held-out seeds, full episodes, and reports eq. 2's
cost per step after the warm-up (mean latency increments per step = -return / steps), and
the same for constant actions: the uniform law (weights 0, wait at -weight_bound, e^-10
times as likely as a featureless node) and, with --tuned, the weights `gmmv tune` found.
Differences are paired by seed, with 95 % t-intervals
(gmm_volunteer.optimisation.search.paired_interval).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import gmm_volunteer.optimisation  # noqa: F401  (registers the environment)
from gmm_volunteer.optimisation.env import SchedulingEnv
from gmm_volunteer.optimisation.search import paired_interval
from gmm_volunteer.policies.weighted import WEIGHTS


def episode_cost(env: SchedulingEnv, seed: int, act) -> float:
    """Mean latency increments per step after the warm-up, one full episode."""
    obs, _ = env.reset(seed=seed)
    total = 0
    while True:
        obs, _, term, trunc, info = env.step(act(obs))
        total += info["latency_increments"]
        if term or trunc:
            break
    return total / (env.sim.t - env.warmup)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timesteps", type=int, default=3000, help="PPO environment steps (default 3000)")
    ap.add_argument("--train-seeds", type=int, default=4, help="parallel training environments (seeds 0..n-1)")
    ap.add_argument("--test-seeds", default="100-104", help="held-out seeds lo-hi (default 100-104)")
    ap.add_argument("--tuned", help="JSON written by `gmmv tune -o` (its weights become a constant baseline)")
    ap.add_argument("--seed", type=int, default=0, help="PPO's seed")
    a = ap.parse_args(argv)
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    lo, hi = (int(x) for x in a.test_seeds.split("-"))
    test = list(range(lo, hi + 1))
    venv = DummyVecEnv([lambda: SchedulingEnv() for _ in range(a.train_seeds)])
    venv.seed(0)  # sub-environment i: training seed i (reset(seed=i)); the test seeds are >= 100
    venv = VecNormalize(venv, norm_obs=False, norm_reward=True)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=5, learning_rate=3e-4,
                gamma=0.95, seed=a.seed, verbose=0, device="cpu")
    t0 = time.perf_counter()
    done = 0
    while done < a.timesteps:
        chunk = min(512, a.timesteps - done)
        model.learn(chunk, reset_num_timesteps=False)
        done += chunk
        print(f"PPO: {model.num_timesteps} env steps, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    train_s = time.perf_counter() - t0

    env = SchedulingEnv()
    zero = np.zeros(len(WEIGHTS), np.float32)
    uniform = zero.copy()
    uniform[WEIGHTS.index("wait_weight")] = -1.0  # -weight_bound: waiting never drawn in practice
    policies = {"PPO": lambda obs: model.predict(obs, deterministic=True)[0],
                "uniform law": lambda obs: uniform}
    if a.tuned:
        w = json.load(open(a.tuned))["weights"]
        vec = np.array([np.clip(w.get(n, 0.0) / env.weight_bound, -1, 1) for n in WEIGHTS], np.float32)
        if "wait_weight" not in w:
            vec[WEIGHTS.index("wait_weight")] = -1.0
        policies["tuned (constant)"] = lambda obs: vec
    costs = {name: np.array([episode_cost(env, s, act) for s in test]) for name, act in policies.items()}
    n = model.num_timesteps  # whole rollouts: a multiple of n_steps x environments
    print(f"trained {n} env steps ({n * env.k} simulated, warm-ups aside) in {train_s:.0f} s")
    print(f"held-out seeds {test}: eq. 2 cost (mean latency increments per step after warm-up)")
    for name, c in costs.items():
        print(f"  {name:<18} {c.mean():8.3f}   per seed {np.round(c, 2).tolist()}")
    for name, c in costs.items():
        if name != "PPO":
            d, l, h, n = paired_interval(costs["PPO"], c)
            print(f"  PPO - {name}: {d:+.3f} [{l:+.3f}, {h:+.3f}] (95% t-interval, {n} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
