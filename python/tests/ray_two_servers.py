"""Two `spade serve` processes under a local Ray cluster on loopback; sessions spread over both.

argv: spade_bin env.py actions.txt sessions
Prints one JSON object: {"urls", "pids", "per_server", "results": {seed: [texts_sha256, total_reward]}}.
"""

import asyncio
import hashlib
import json
import sys

import ray

from spade_client.ray_cluster import SessionSpreader, start_servers, stop_servers

spade_bin, env_file, actions_file, sessions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
actions = open(actions_file, encoding="utf-8").read().splitlines()

ray.init(
    address="local",
    _node_ip_address="127.0.0.1",
    num_cpus=2,
    include_dashboard=False,
    log_to_driver=False,
    configure_logging=False,
)
try:
    # A node address without a token is refused before any server starts.
    try:
        start_servers(spade_bin, [env_file], host="10.255.255.1")
        refused = None
    except ValueError as err:
        refused = str(err)
    servers = start_servers(spade_bin, [env_file], per_node=2)
    spreader = SessionSpreader([s.url for s in servers])

    async def play(i):
        texts, total = [], 0.0
        async with spreader.session(i) as env:
            result = await env.reset(seed=7)
            texts.append(result.observation.text)
            for action in actions:
                result = await env.step(action)
                texts.append(result.observation.text)
                total += result.reward
                if result.done:
                    break
        return i, spreader.url_for(i), hashlib.sha256("\n\x00".join(texts).encode()).hexdigest(), total

    async def main():
        return await asyncio.gather(*(play(i) for i in range(sessions)))

    played = asyncio.run(main())
    per_server = {s.url: sum(1 for _, u, _, _ in played if u == s.url) for s in servers}
    out = {
        "urls": [s.url for s in servers],
        "pids": [s.pid for s in servers],
        "per_server": per_server,
        "results": {str(i): [h, t] for i, _, h, t in played},
        "exit_codes": stop_servers(servers),
        "refused_without_token": refused,
    }
    print(json.dumps(out))
finally:
    ray.shutdown()
