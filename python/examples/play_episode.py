"""Play one episode on a `spade serve` server with the typed client.

    spade serve tests/envs/grid_walk/env.py &
    python python/examples/play_episode.py --url http://127.0.0.1:8000 \
        --seed 7 --actions tests/envs/grid_walk/actions.txt

Without --actions, it reads one action per line from standard input.
"""

import argparse
import sys

from spade_client import SpadeAction, SpadeEnv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--env-id", default=None, help="needed when several envs are registered")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hint", default=None)
    parser.add_argument("--token", default=None, help="the server's bearer token, if it has one")
    parser.add_argument("--actions", default=None, help="a file with one action per line")
    args = parser.parse_args()
    if args.actions:
        with open(args.actions, encoding="utf-8") as f:
            actions = f.read().splitlines()
    else:
        actions = (line.rstrip("\n") for line in sys.stdin)

    with SpadeEnv(base_url=args.url, token=args.token).sync() as env:
        fields = {"seed": args.seed}
        if args.env_id:
            fields["env_id"] = args.env_id
        if args.hint:
            fields["hint"] = args.hint
        result = env.reset(**fields)
        print(f"== {result.observation.env_id} seed {args.seed} (episode {result.observation.episode_id})")
        print(result.observation.text)
        total, steps = 0.0, 0
        for action in actions:
            result = env.step(SpadeAction(action))
            steps += 1
            total += result.reward or 0.0
            print(f"== step {steps}: {action}  reward {result.reward}")
            print(result.observation.text)
            if result.done:
                how = "terminated" if result.observation.terminated else "truncated"
                print(f"== episode {how} after {steps} steps, total reward {total}")
                return 0
        print(f"== no more actions after {steps} steps (episode not over), total reward {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
