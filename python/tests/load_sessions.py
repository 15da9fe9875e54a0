"""Load test: many concurrent sessions from one client process (stock OpenEnv client).

argv: url plan.json
plan.json: [{"env_id", "seed", "episode_id", "actions": [...]}, ...]; each session plays its
actions and must end (done) exactly at the last one. All sessions reset before any steps, so
all of them are open on the server at once.
Prints one JSON object: {episode_id: {"texts_sha256", "steps", "trace_sha256"}}; the trace hash
is read from the trajectory fetched over HTTP after the session closed.
"""

import asyncio
import hashlib
import json
import sys
import urllib.request

from openenv.core.generic_client import GenericEnvClient

url, plan_file = sys.argv[1], sys.argv[2]
plan = json.load(open(plan_file, encoding="utf-8"))


def texts_hash(texts):
    return hashlib.sha256("\n\x00".join(texts).encode("utf-8")).hexdigest()


async def play(entry, barrier):
    texts = []
    async with GenericEnvClient(base_url=url, message_timeout_s=600) as env:
        result = await env.reset(env_id=entry["env_id"], seed=entry["seed"], episode_id=entry["episode_id"])
        assert result.observation["metadata"]["episode_id"] == entry["episode_id"], result
        texts.append(result.observation["text"])
        await barrier.wait()
        for i, action in enumerate(entry["actions"]):
            result = await env.step({"message": action})
            texts.append(result.observation["text"])
            last = i == len(entry["actions"]) - 1
            assert result.done == last, (entry["episode_id"], i, result.done)
    return entry["episode_id"], texts


async def main():
    barrier = asyncio.Barrier(len(plan))
    results = await asyncio.gather(*(play(entry, barrier) for entry in plan))
    out = {}
    for episode_id, texts in results:
        with urllib.request.urlopen(f"{url}/trajectories/{episode_id}", timeout=60) as response:
            lines = response.read().decode("utf-8").splitlines()
        footer = json.loads(lines[-1])
        assert footer["type"] == "footer", (episode_id, lines[-1][:200])
        out[episode_id] = {"texts_sha256": texts_hash(texts), "steps": len(texts) - 1, "trace_sha256": footer["trace_sha256"]}
    print(json.dumps(out))


asyncio.run(main())
