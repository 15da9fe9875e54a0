"""`spade.gym.SpadeEnv` under Gymnasium's own checker, in a `SyncVectorEnv` of 4, through
`gymnasium.make`, and against `spade run` for the same seed and actions."""

import json

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import spade
import spade.gym
from conftest import ENVS, TEST_LIMITS, fixture_actions, fixture_source, run_spade

OPTIONS_ENV = """
class OptionsEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
    def reset(self, seed=None, difficulty=1):
        self.difficulty, self.turns = difficulty, 0
        return f"difficulty {difficulty} seed {seed}", {"difficulty": difficulty}
    def step(self, action):
        self.turns += 1
        if action == "raise":
            raise ValueError("bad move")
        if action == "spin":
            while True:
                pass
        return f"got {action}", 0.5, False, self.turns >= self.max_turns, {}
    def solution(self):
        return "x"
"""


def test_check_env_passes_on_fixtures():
    for name in ("arithmetic_puzzle", "tool_inventory", "grid_walk"):
        env = spade.gym.SpadeEnv(fixture_source(name))
        check_env(env, skip_render_check=True)
        env.close()


def test_episodes_play_as_spade_run():
    done = run_spade("run", ENVS / "grid_walk" / "env.py", "--seed", "7", "--json",
                     "--actions", ENVS / "grid_walk" / "actions.txt")
    expected = [json.loads(line) for line in done.stdout.splitlines()]
    env = spade.gym.SpadeEnv(fixture_source("grid_walk"))
    obs, info = env.reset(seed=7)
    assert (obs, info) == (expected[1]["observation"], expected[1]["info"])
    steps = [r for r in expected if r["call"] == "step"]
    for action, want in zip(fixture_actions("grid_walk"), steps):
        got = env.step(action)
        assert got == (want["observation"], want["reward"], want["terminated"],
                       want["truncated"], want["info"])
    env.close()


def test_a_sync_vector_env_of_four():
    source = fixture_source("arithmetic_puzzle")
    envs = gymnasium.vector.SyncVectorEnv([lambda: spade.gym.SpadeEnv(source)] * 4)
    obs, infos = envs.reset(seed=[1, 2, 3, 4])
    assert len(obs) == 4 and all(isinstance(o, str) for o in obs)
    # Each sub-environment plays as a lone SpadeEnv with its seed.
    for i, seed in enumerate([1, 2, 3, 4]):
        alone = spade.gym.SpadeEnv(source)
        assert alone.reset(seed=seed)[0] == obs[i]
        alone.close()
    actions = ("\\boxed{0}",) * 4
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    assert len(obs) == 4 and rewards.shape == (4,) and terminated.shape == (4,)
    envs.close()


def test_make_by_id_and_registered_environments():
    env = gymnasium.make(spade.gym.ENV_ID, source=fixture_source("arithmetic_puzzle"))
    obs, _ = env.reset(seed=3)
    assert isinstance(obs, str) and obs
    env.close()
    spade.gym.register("spade-test/Options-v0", OPTIONS_ENV)
    env = gymnasium.make("spade-test/Options-v0")
    assert env.reset(seed=5, options={"difficulty": 4}) == ("difficulty 4 seed 5", {"difficulty": 4})
    env.close()


def test_options_are_passed_only_where_reset_takes_them():
    env = spade.gym.SpadeEnv(OPTIONS_ENV)
    assert env.reset(seed=2, options={"difficulty": 3})[0] == "difficulty 3 seed 2"
    env.close()
    # arithmetic_puzzle's reset takes only `seed`: the option is dropped, the reset runs.
    plain = spade.gym.SpadeEnv(fixture_source("arithmetic_puzzle"))
    alone = spade.gym.SpadeEnv(fixture_source("arithmetic_puzzle"))
    assert plain.reset(seed=2, options={"difficulty": 3}) == alone.reset(seed=2)
    with pytest.raises(ValueError, match="options must be JSON values: "):
        plain.reset(seed=2, options={"difficulty": object()})
    with pytest.raises(gymnasium.error.ResetNeeded, match="call reset\\(\\) before step\\(\\)"):
        spade.gym.SpadeEnv(OPTIONS_ENV).step("a")


def test_errors_end_the_episode_with_a_visible_reason():
    env = spade.gym.SpadeEnv(OPTIONS_ENV, runtime=spade.Runtime(limits=TEST_LIMITS))
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("raise")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["spade_error"] == "exception", info
    assert obs.startswith("The episode ended with an error (exception): ")
    assert "bad move" in obs
    env.reset(seed=1)  # a fresh sandbox: the next episode plays
    assert env.step("a")[0] == "got a"
    obs, reward, terminated, truncated, info = env.step("spin")
    assert (reward, truncated, info["spade_error"]) == (0.0, True, "out_of_fuel"), info
    assert env.step("a")[4]["spade_error"] == "out_of_fuel"  # stays ended until reset
    assert env.reset(seed=1)[0] == "difficulty 1 seed 1"
    env.close()


def test_a_source_or_a_name_is_required():
    with pytest.raises(ValueError, match="SpadeEnv takes exactly one of source"):
        spade.gym.SpadeEnv()
    with pytest.raises(ValueError, match="SpadeEnv has no render modes, not 'human'"):
        spade.gym.SpadeEnv("x", render_mode="human")
