"""Drive one episode through `spade serve` with the stock OpenEnv client (no spade code).

argv: url env_id seed actions_file [token]
Prints one JSON line per call in `spade run --json`'s shape (reset, then each step; an error
line `{"call":..., "error": message}` ends the episode).
"""

import json
import sys

from openenv.core.generic_client import GenericEnvClient

url, env_id, seed, actions_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
token = sys.argv[5] if len(sys.argv) > 5 else None
headers = {"Authorization": f"Bearer {token}"} if token else None
actions = open(actions_file, encoding="utf-8").read().splitlines()


def emit(obj):
    print(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), flush=True)


with GenericEnvClient(base_url=url, headers=headers).sync() as env:
    try:
        result = env.reset(env_id=env_id, seed=seed)
    except RuntimeError as err:
        emit({"call": "reset", "error": str(err)})
        sys.exit(0)
    obs = result.observation
    assert result.reward is None and result.done is False, result
    emit({"call": "reset", "seed": seed, "observation": obs["text"], "info": obs["info"], "fuel": obs["metadata"]["fuel"]})
    for index, action in enumerate(actions, start=1):
        try:
            result = env.step({"message": action})
        except RuntimeError as err:
            emit({"call": "step", "index": index, "action": action, "error": str(err)})
            break
        obs = result.observation
        assert result.done == (obs["terminated"] or obs["truncated"]), result
        emit({
            "call": "step", "index": index, "action": action, "observation": obs["text"],
            "reward": result.reward, "terminated": obs["terminated"], "truncated": obs["truncated"],
            "info": obs["info"], "fuel": obs["metadata"]["fuel"],
        })
        if result.done:
            break
