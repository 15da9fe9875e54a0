"""CPython side of `spade bench`: play an environment in-process, as the SPADE reference does.

argv: prelude_dir env.py actions.txt steps seed [loads]
Prints one JSON object: {"steps_per_s": ..., "step_us_median": ..., "load_reset_us_median": ...}.
`load_reset_us_median` times the reference's way of starting an episode of a generated
environment, `loads` times (default 200): compile the source, exec the module, construct the
class, reset; each time from the source text, with seed `seed + i`.
"""
import json
import statistics
import sys
import time

sys.path.insert(0, sys.argv[1])
import spade_prelude  # noqa: E402

source = open(sys.argv[2], encoding="utf-8").read()
actions = open(sys.argv[3], encoding="utf-8").read().splitlines()
steps, seed = int(sys.argv[4]), int(sys.argv[5])
loads = int(sys.argv[6]) if len(sys.argv) > 6 else 200

load_durations = []
for i in range(loads):
    t0 = time.perf_counter()
    fresh, _ = spade_prelude.load(source, None, seed + i)
    fresh.reset(seed=seed + i)
    load_durations.append(time.perf_counter() - t0)

env, _ = spade_prelude.load(source, None, seed)
env.reset(seed=seed)
episode, index, durations = 0, 0, []
start = time.perf_counter()
for _ in range(steps):
    t0 = time.perf_counter()
    _, _, terminated, truncated, _ = env.step(actions[index % len(actions)])
    durations.append(time.perf_counter() - t0)
    index += 1
    if terminated or truncated:
        episode += 1
        index = 0
        env.reset(seed=seed + episode)
elapsed = time.perf_counter() - start
print(
    json.dumps(
        {
            "steps_per_s": steps / elapsed,
            "step_us_median": statistics.median(durations) * 1e6,
            "load_reset_us_median": statistics.median(load_durations) * 1e6,
        }
    )
)
