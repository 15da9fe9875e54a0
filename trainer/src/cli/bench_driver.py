"""CPython side of `spade bench`: play an environment in-process, as the SPADE reference does.

argv: prelude_dir env.py actions.txt steps seed
Prints one JSON object: {"steps_per_s": ..., "step_us_median": ...}.
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
print(json.dumps({"steps_per_s": steps / elapsed, "step_us_median": statistics.median(durations) * 1e6}))
