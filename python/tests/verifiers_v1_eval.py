"""A verifiers 0.4 evaluation, with the stock `vf-eval`, of the taskset `spade-verifiers`
against a scripted OpenAI-compatible model (fake_openai.py). Prints one JSON object per
rollout: the task's environment and seed, its reward `spade_return` and how it ended.

argv: out_dir script.txt rollouts_per_task env [env ...] -- seed [seed ...]
"""

import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fake_openai  # noqa: E402

out_dir, script_path, rollouts = sys.argv[1], sys.argv[2], sys.argv[3]
rest = sys.argv[4:]
split = rest.index("--")
envs, seeds = rest[:split], [int(s) for s in rest[split + 1:]]
script = pathlib.Path(script_path).read_text().splitlines()
base_url, server = fake_openai.start(script)
bindir = pathlib.Path(sys.executable).parent
done = subprocess.run(
    [str(bindir / "vf-eval"), "spade-verifiers", "-m", "fake", "--client.base-url", base_url,
     "--client.api-key-var", "FAKE_OPENAI_KEY", "--env.taskset.envs", json.dumps(envs),
     "--env.taskset.seeds", json.dumps(seeds), "-r", rollouts, "--no-push", "--no-rich",
     "-o", out_dir],
    env={**os.environ, "FAKE_OPENAI_KEY": "fake", "PATH": f"{bindir}:{os.environ['PATH']}"},
    capture_output=True, text=True, timeout=900,
)
server.shutdown()
if done.returncode != 0:
    sys.exit(f"vf-eval failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
traces = list(pathlib.Path(out_dir).glob("*/traces.jsonl"))
if len(traces) != 1:
    sys.exit(f"expected one traces.jsonl under {out_dir}, found {traces}\n{done.stderr[-4000:]}")
for line in traces[0].read_text().splitlines():
    print(line)
print(json.dumps({"requests": server.requests}))
