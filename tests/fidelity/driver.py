"""Plays a fixture environment under CPython exactly as `spade run --json` plays it in the sandbox.

argv: prelude_dir env.py seed actions.txt
The environment is loaded with the sandbox's own prelude (`spade_prelude.load`, which seeds the
module-global `random` with the seed, injects the reference loader's names and provides
`ToolUseBaseEnv` and `math_verify`), reset with `reset(seed=seed)`, then stepped once per action
line until the episode ends. Prints one JSON object per call.
"""
import json
import sys

sys.path.insert(0, sys.argv[1])
import spade_prelude  # noqa: E402

source = open(sys.argv[2], encoding="utf-8").read()
seed = int(sys.argv[3])
actions = open(sys.argv[4], encoding="utf-8").read().splitlines()

env, class_name = spade_prelude.load(source, None, seed)
print(json.dumps({"call": "load", "class": class_name}))
observation, info = env.reset(seed=seed)
print(json.dumps({"call": "reset", "seed": seed, "observation": observation, "info": info}))
for index, action in enumerate(actions, start=1):
    observation, reward, terminated, truncated, info = env.step(action)
    print(json.dumps({
        "call": "step", "index": index, "action": action, "observation": observation,
        "reward": float(reward), "terminated": terminated, "truncated": truncated, "info": info,
    }))
    if terminated or truncated:
        break
