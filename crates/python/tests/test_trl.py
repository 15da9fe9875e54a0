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
