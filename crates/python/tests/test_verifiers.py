"""verifiers 0.4 (v1 API): the stock `vf-eval` evaluates the installed environment package
`spade-verifiers` (python/verifiers_env) against a scripted OpenAI-compatible model: 8 rollouts,
each with the reward `spade run` gives the same replies; an environment that fails ends its
rollouts with the error as their visible reason, not as a failed rollout.

verifiers 0.4 cannot share the serve venv (it pins mcp==2.0.0, openenv 0.10 needs mcp<2), so
this test builds its own venv next to it, once (python/requirements-verifiers.txt), with this
checkout's `spade` on its path."""

import json
import os
import pathlib
import subprocess
import sys

from conftest import ENVS, REPO, run_spade

# The replies: grid_walk's actions, then its last one until every episode has ended (the fake
# model repeats its last line, and `spade run` gets the same list).
REPLIES = (ENVS / "grid_walk" / "actions.txt").read_text().splitlines()
REPLIES += REPLIES[-1:] * 30
ENV_FILES = ["tests/envs/grid_walk/env.py", "tests/envs/fault_step_four_tuple/env.py"]
SEEDS = [7, 8]


def venv_python(name, requirements, env_var):
    """The python of the venv `name` next to the serve venv, made if missing
    (`$<env_var>` overrides the path), with this checkout's `spade` on its path and the
    environment package python/verifiers_env installed as a user installs it."""
    default = pathlib.Path(sys.executable).parent.parent.parent / name
    venv = pathlib.Path(os.environ.get(env_var, default))
    python = venv / "bin" / "python"
    ready = [str(python), "-c", "import verifiers, spade._native"]
    if not python.exists() or subprocess.run(ready, capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", "-r", str(requirements)], check=True)
        site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        # This checkout's in-process package (built in place by `maturin develop`).
        pathlib.Path(site, "spade_inprocess.pth").write_text(
            str(REPO / "crates" / "python" / "python") + "\n")
    # Again each run: it is small, and a changed package must be the one tested.
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", "--force-reinstall", str(REPO / "python" / "verifiers_env")],
                   check=True, cwd=REPO)
    return python


def replies_file(tmp_path):
    script = tmp_path / "replies.txt"
    script.write_text("\n".join(REPLIES) + "\n")
    return script


def spade_run_transcript(env, seed, script):
    done = run_spade("run", REPO / env, "--seed", seed, "--json", "--actions", script,
                     check=False)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_vf_eval_rewards_equal_spade_run_returns(tmp_path):
    python = venv_python("verifiers-venv", REPO / "python" / "requirements-verifiers.txt",
                         "SPADE_VERIFIERS_VENV")
    script = replies_file(tmp_path)
    done = subprocess.run(
        [str(python), str(REPO / "python" / "tests" / "verifiers_v1_eval.py"), str(tmp_path / "out"),
         str(script), "2", *ENV_FILES, "--", *map(str, SEEDS)],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    rollouts = [line for line in lines if "traces" in line]
    assert len(rollouts) == 8, [r.get("task", {}).get("data", {}).get("name") for r in rollouts]
    seen = {}
    for rollout in rollouts:
        assert rollout["ok"] and not rollout["errors"], rollout["errors"]
        info = rollout["task"]["data"]["info"]
        (trace,) = rollout["traces"]
        key = (info["env"], info["seed"])
        seen[key] = seen.get(key, 0) + 1
        transcript = spade_run_transcript(info["env"], info["seed"], script)
        reward = trace["rewards"]["spade_return"]["score"]
        end = transcript[-1]
        if end["call"] == "end":
            assert abs(reward - end["total_reward"]) < 1e-9, (key, reward, end)
            assert trace["info"]["spade_ended"] == end["ended"], (key, trace["info"])
        else:
            # The environment failed on a step: the return so far, and the error as the reason.
            error = end["error"]
            returns = sum(r.get("reward", 0.0) for r in transcript if r["call"] == "step")
            assert abs(reward - returns) < 1e-9, (key, reward, returns)
            assert trace["info"]["spade_ended"] == error["kind"], trace["info"]
            assert error["message"] in trace["info"]["spade_error"], trace["info"]
    assert seen == {(env, seed): 2 for env in ENV_FILES for seed in SEEDS}, seen


def test_legacy_load_environment_rolls_out_under_verifiers_0_3(tmp_path):
    python = venv_python("verifiers-legacy-venv",
                         REPO / "python" / "requirements-verifiers-legacy.txt",
                         "SPADE_VERIFIERS_LEGACY_VENV")
    script = replies_file(tmp_path)
    done = subprocess.run(
        [str(python), str(REPO / "python" / "tests" / "verifiers_legacy_eval.py"), str(script),
         "2", *ENV_FILES, "--", *map(str, SEEDS)],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    rollouts = [json.loads(line) for line in done.stdout.splitlines()][:-1]
    assert len(rollouts) == 8, rollouts
    seen = {}
    for rollout in rollouts:
        assert rollout["error"] is None, rollout
        info = rollout["info"]
        key = (info["env"], info["seed"])
        seen[key] = seen.get(key, 0) + 1
        transcript = spade_run_transcript(info["env"], info["seed"], script)
        end = transcript[-1]
        steps = [r for r in transcript if r["call"] == "step"]
        if end["call"] == "end":
            assert abs(rollout["reward"] - end["total_reward"]) < 1e-9, (key, rollout, end)
            assert rollout["spade_ended"] == end["ended"], rollout
            assert rollout["turns"] == end["steps"], rollout
        else:
            returns = sum(r.get("reward", 0.0) for r in steps)
            assert abs(rollout["reward"] - returns) < 1e-9, (key, rollout)
            assert rollout["spade_ended"] == end["error"]["kind"], rollout
            assert end["error"]["message"] in rollout["spade_error"], rollout
    assert seen == {(env, seed): 2 for env in ENV_FILES for seed in SEEDS}, seen
