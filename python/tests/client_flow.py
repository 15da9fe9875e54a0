"""The spade_client package against a live server: registration, the typed client (hint,
state, typed errors, trajectory fetch), the TRL-style environment and its reward.

argv: url expected.json
expected.json: {"env_id", "seed", "actions", "texts", "rewards", "faulty_source", "faulty_codes", "source"}
Exits non-zero with a message on the first mismatch; prints "ok" at the end.
"""

import gc
import inspect
import json
import sys
import time
import urllib.request

from transformers.utils import get_json_schema

from spade_client import SpadeAction, SpadeEnv, SpadeServerError, SpadeToolEnv, list_envs, register_env

url = sys.argv[1]
exp = json.load(open(sys.argv[2], encoding="utf-8"))


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


# Registration: an accepted source gets an id and a verdict; a faulty one is rejected.
reg = register_env(url, exp["source"], env_id="copy")
check(reg.id == "copy" and reg.accepted and reg.verdict["accepted"] is True, f"accepted registration: {reg}")
bad = register_env(url, exp["faulty_source"])
check(not bad.accepted and bad.id.startswith("env-"), f"rejected registration: {bad}")
check(bad.error_codes == exp["faulty_codes"], f"rejected codes {bad.error_codes} != {exp['faulty_codes']}")
ids = [e["id"] for e in list_envs(url)]
check("copy" in ids and bad.id in ids, f"listing: {ids}")
try:
    register_env(url, exp["faulty_source"], env_id="copy")
    check(False, "re-registering an id with another source must fail")
except SpadeServerError as err:
    check(err.code == "HTTP_409" and "already registered" in err.message, f"conflict: {err}")

with SpadeEnv(base_url=url).sync() as env:
    # A rejected env cannot be reset.
    try:
        env.reset(env_id=bad.id)
        check(False, "a rejected env must not reset")
    except SpadeServerError as err:
        check(err.code == "VALIDATION_ERROR" and "rejected by spade check" in err.message, f"rejected reset: {err}")
    # Typed episode with a hint.
    result = env.reset(env_id=exp["env_id"], seed=exp["seed"], hint="try right")
    obs = result.observation
    check(obs.text == exp["texts"][0] + "\n\nHINT: try right", f"hinted observation: {obs.text!r}")
    check(result.reward is None and not result.done, "reset reward/done")
    episode_id = obs.episode_id
    for i, action in enumerate(exp["actions"]):
        result = env.step(SpadeAction(action))
        check(result.observation.text == exp["texts"][i + 1], f"step {i + 1} text")
        check(result.reward == exp["rewards"][i], f"step {i + 1} reward {result.reward} != {exp['rewards'][i]}")
        check(result.observation.step_count == i + 1, "step count")
    check(result.done and result.observation.terminated, "episode terminated")
    state = env.state()
    check(state.episode_id == episode_id and state.step_count == len(exp["actions"]) and state.done, f"state {state}")
    # After the end, a step is a typed error; the session goes on.
    try:
        env.step("again")
        check(False, "a step after the end must fail")
    except SpadeServerError as err:
        check(err.code == "VALIDATION_ERROR" and "is over (terminated)" in err.message, f"after end: {err}")
    # The trajectory carries the hint.
    lines = env.trajectory(episode_id).splitlines()
    header, footer = json.loads(lines[0]), json.loads(lines[-1])
    check(header["hint"] == "try right" and footer["outcome"] == "terminated", f"trajectory {header['hint']} {footer}")
    check(footer["steps"] == len(exp["actions"]), "trajectory steps")

# The TRL-style environment: reset from a dataset row, one tool, the reward on the instance.
tool_env = SpadeToolEnv(url)
first = tool_env.reset(env_id=exp["env_id"], seed=exp["seed"], prompt="a dataset column TRL passes")
check(first == exp["texts"][0], "tool env first observation")
for i, action in enumerate(exp["actions"]):
    text = tool_env.reply(action)
    check(text == exp["texts"][i + 1], f"tool env step {i + 1}")
check(tool_env.done and tool_env.reward == exp["rewards"][-1], f"tool env reward {tool_env.reward}")
check(abs(tool_env.total_reward - sum(exp["rewards"])) < 1e-9, "tool env total reward")
check(tool_env.reply("more") == "The episode is over.", "tool env after the end")
check(tool_env.get_reward() == tool_env.total_reward, "get_reward is the episode's return")
tool_env.close()

# What TRL 1.16's GRPOTrainer does with an environment class (grpo_trainer.py): every function
# on the class except reset and get_reward whose name does not start with "_" becomes a tool,
# its JSON schema built from the docstring by transformers.utils.get_json_schema.
members = [name for name, _ in inspect.getmembers(SpadeToolEnv, predicate=inspect.isfunction)]
tools = [m for m in members if m not in ("reset", "get_reward") and not m.startswith("_")]
check(tools == ["reply"], f"the tools TRL would expose: {tools}")
check("reset" in members and "get_reward" in members, f"TRL needs reset and get_reward: {members}")
schema = get_json_schema(SpadeToolEnv(url).reply)
check(schema["function"]["name"] == "reply", f"tool schema {schema}")
check(list(schema["function"]["parameters"]["properties"]) == ["message"], f"tool parameters {schema}")


def active_sessions():
    with urllib.request.urlopen(f"{url}/health") as answer:
        return json.load(answer)["sessions"]["active"]


# TRL never calls close: the session is released when the instance is dropped.
base = active_sessions()
dropped = SpadeToolEnv.factory(url)()
dropped.reset(env_id=exp["env_id"], seed=exp["seed"])
check(active_sessions() == base + 1, "the tool env holds a session")
del dropped
gc.collect()
deadline = time.time() + 10
while active_sessions() != base and time.time() < deadline:
    time.sleep(0.05)
check(active_sessions() == base, f"a dropped tool env released its session ({active_sessions()} != {base})")
with SpadeToolEnv(url) as scoped:
    scoped.reset(env_id=exp["env_id"], seed=exp["seed"])
deadline = time.time() + 10
while active_sessions() != base and time.time() < deadline:
    time.sleep(0.05)
check(active_sessions() == base, "leaving a with block released the session")
print("ok")
