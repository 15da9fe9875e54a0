"""TRL's GRPOTrainer, unchanged, trains through `spade.trl.SandboxToolEnv`: environments run
in-process in the wheel's sandboxes (python/tests/trl_grpo_step.py, the same script the
served test runs, with `inprocess:` instead of a URL)."""

import json
import subprocess
import sys

from conftest import REPO


def test_grpo_trainer_trains_through_in_process_sandboxes(tmp_path):
    env = REPO / "tests" / "serve" / "trl_echo.py"
    done = subprocess.run(
        [sys.executable, str(REPO / "python" / "tests" / "trl_grpo_step.py"),
         f"inprocess:{env}", "trl_echo", str(tmp_path)],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    episodes = result["episodes"]
    assert len(episodes) == 4, result
    # trl_echo scores 0.75 for a reply with \boxed{} and 0.25 otherwise; an episode the model
    # never replied in scores 0. Each episode's recording has the total in its footer.
    totals = []
    for episode in episodes:
        lines = (tmp_path / "traj" / f"{episode}.jsonl").read_text().splitlines()
        footer = json.loads(lines[-1])
        assert footer["type"] == "footer", footer
        assert footer["total_reward"] in (0.0, 0.25, 0.75), footer
        totals.append(footer["total_reward"])
    mean = sum(totals) / len(totals)
    assert mean > 0.0, f"no rollout called the tool: {totals}"
    assert abs(result["reward_mean"] - mean) < 1e-6, (result["reward_mean"], totals)


def _play_in_child(factory, row, reply):
    """Runs in a spawned process, as TRL's AsyncGRPOTrainer's rollout worker does."""
    env = factory()
    first = env.reset(**row)
    obs = env.reply(reply)
    return first, obs, env.get_reward()


def test_the_factory_is_picklable_and_plays_in_a_spawned_process(tmp_path):
    import multiprocessing
    import pickle

    from spade.trl import SandboxToolEnv

    source = (REPO / "tests" / "serve" / "trl_echo.py").read_text()
    factory = SandboxToolEnv.factory({"trl_echo": source}, record_dir=str(tmp_path))
    assert pickle.loads(pickle.dumps(factory))().reset(env_id="trl_echo", seed=1)
    here = factory()
    row = {"env_id": "trl_echo", "seed": 3, "prompt": "ignored"}
    want = (here.reset(**row), here.reply("\\boxed{a}"), here.get_reward())
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(_play_in_child, (factory, row, "\\boxed{a}"))
    assert got == want
    assert want[2] == 0.75  # trl_echo: a reply with \boxed{} scores 0.75


def test_the_served_factory_is_picklable():
    import pickle

    from spade_client import SpadeToolEnv

    factory = pickle.loads(pickle.dumps(SpadeToolEnv.factory("http://127.0.0.1:9", token="t")))
    assert factory.args == ("http://127.0.0.1:9",)
    assert factory.keywords == {"token": "t", "env_id": None}
