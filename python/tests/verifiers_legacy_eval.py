"""verifiers 0.3.x (legacy API): `vf.load_environment("spade-verifiers", ...)` (the installed
python/verifiers_env package), rolled out with the stock `evaluate_sync` against a scripted
OpenAI-compatible model (fake_openai.py). Prints one JSON object per rollout: its info, reward,
error, and the state columns `spade_ended` / `spade_error`.

argv: script.txt rollouts_per_task env [env ...] -- seed [seed ...]
"""

import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fake_openai  # noqa: E402
import verifiers as vf  # noqa: E402
from verifiers.types import ClientConfig  # noqa: E402

script_path, rollouts = sys.argv[1], int(sys.argv[2])
rest = sys.argv[3:]
split = rest.index("--")
envs, seeds = rest[:split], [int(s) for s in rest[split + 1:]]
base_url, server = fake_openai.start(pathlib.Path(script_path).read_text().splitlines())
os.environ["FAKE_OPENAI_KEY"] = "fake"
env = vf.load_environment("spade-verifiers", envs=envs, seeds=seeds)
results = env.evaluate_sync(
    client=ClientConfig(api_base_url=base_url, api_key_var="FAKE_OPENAI_KEY", max_retries=0),
    model="fake", rollouts_per_example=rollouts, state_columns=["spade_ended", "spade_error"],
)
server.shutdown()
for output in results["outputs"]:
    info = output["info"]
    print(json.dumps({
        "info": json.loads(info) if isinstance(info, str) else info,
        "reward": output["reward"], "error": output.get("error"),
        "spade_ended": output.get("spade_ended"), "spade_error": output.get("spade_error"),
        "turns": sum(1 for m in output["completion"] or [] if m["role"] == "assistant"),
    }, default=str))
print(json.dumps({"requests": server.requests}))
