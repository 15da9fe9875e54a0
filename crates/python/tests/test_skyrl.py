"""SkyRL: `spade.skyrl.SpadeTextEnv`, made by the stock `skyrl_gym.make("spade", ...)` as
SkyRL's generator makes a row's `env_class`, plays as `spade run`; an environment that fails
ends its episode with the reason."""

import json

import pytest
import skyrl_gym

import spade.skyrl  # noqa: F401  (registers "spade")
from conftest import ENVS, fixture_actions, run_spade


def test_skyrl_gym_make_plays_as_spade_run():
    done = run_spade("run", ENVS / "grid_walk" / "env.py", "--seed", "8", "--json",
                     "--actions", ENVS / "grid_walk" / "actions.txt")
    expected = [json.loads(line) for line in done.stdout.splitlines()]
    env = skyrl_gym.make("spade", env_config=None,
                         extras={"env": str(ENVS / "grid_walk" / "env.py"), "seed": 8})
    prompt = [{"role": "system", "content": "Play."}]
    messages, _ = env.init(prompt)
    assert messages == prompt + [{"role": "user", "content": expected[1]["observation"]}]
    steps = [r for r in expected if r["call"] == "step"]
    for action, want in zip(fixture_actions("grid_walk"), steps):
        out = env.step(action)
        assert out["reward"] == want["reward"]
        assert out["metadata"]["observation"] == want["observation"]
        assert out["done"] == (want["terminated"] or want["truncated"])
        if not out["done"]:
            assert out["observations"] == [{"role": "user", "content": want["observation"]}]
    total = sum(s["reward"] for s in steps[:len(fixture_actions("grid_walk"))])
    assert env.get_metrics() == {"spade_return": pytest.approx(total)}
    env.close()


def test_an_environment_error_ends_the_episode_with_its_reason():
    env = skyrl_gym.make("spade", env_config=None,
                         extras={"env": str(ENVS / "fault_step_four_tuple" / "env.py")})
    env.init([])
    out = env.step("anything")
    assert out["done"] and out["reward"] == 0.0
    assert out["metadata"]["spade_error"] == "contract"
    assert out["observations"][0]["content"].startswith(
        "The episode ended with an error (contract): step() must return a tuple")
    env.close()
    with pytest.raises(ValueError, match=r"needs extras\['env'\]"):
        skyrl_gym.make("spade", env_config=None, extras={})
    with pytest.raises(ValueError, match="environment file 'nope.py' does not exist"):
        skyrl_gym.make("spade", env_config=None, extras={"env": "nope.py"})
