"""Every fixture environment plays identically through the wheel and through
`spade run --json` (the Rust binary of the same checkout)."""

import json

import pytest

from conftest import fixture_actions, fixture_names, fixture_source, run_spade, ENVS

# `nondeterminism` prints `id()` values, which depend on the heap layout of the process that
# compiled the guest; its determinism is tested by the Rust tests.
NAMES = [n for n in fixture_names(faults=False) if n != "nondeterminism"]


def without_fuel(record):
    record.pop("fuel", None)
    return record


def play_in_process(runtime, name):
    """The transcript `spade run --json --seed 7 --actions actions.txt` prints, made through
    the wheel: load, reset(7), the actions until the episode ends."""
    lines = []
    env = runtime.load(fixture_source(name), seed=7)
    lines.append({"call": "load", "class": env.class_name})
    obs, info = env.reset(seed=7)
    lines.append(with_output(env, {"call": "reset", "seed": 7, "observation": obs, "info": info}))
    actions = fixture_actions(name)
    total = 0.0
    for i, action in enumerate(actions, start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        lines.append(with_output(env, {
            "call": "step", "index": i, "action": action, "observation": obs, "reward": reward,
            "terminated": terminated, "truncated": truncated, "info": info,
        }))
        if terminated or truncated:
            lines.append({
                "call": "end", "steps": i, "total_reward": total,
                "ended": "terminated" if terminated else "truncated",
                "unused_actions": len(actions) - i,
            })
            break
    else:
        lines.append({"call": "end", "steps": len(actions), "total_reward": total,
                      "ended": "actions_exhausted"})
    env.close()
    return lines


def with_output(env, record):
    """Adds what the last call printed, under the keys `spade run --json` uses."""
    stdout, stderr, dropped = env.last_output
    if stdout:
        record["stdout"] = stdout
    if stderr:
        record["stderr"] = stderr
    if dropped:
        record["output_dropped_bytes"] = dropped
    return record


@pytest.mark.parametrize("name", NAMES)
def test_fixture_plays_as_spade_run(runtime, name):
    args = ["run", ENVS / name / "env.py", "--seed", "7", "--json"]
    if (ENVS / name / "actions.txt").exists():
        args += ["--actions", ENVS / name / "actions.txt"]
    done = run_spade(*args)
    expected = [without_fuel(json.loads(line)) for line in done.stdout.splitlines()]
    got = play_in_process(runtime, name)
    assert len(got) == len(expected), (got, expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"{name}: call {i} differs"


def test_every_good_fixture_is_covered():
    assert len(NAMES) >= 20, NAMES
