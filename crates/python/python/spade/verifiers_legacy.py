"""verifiers 0.3.x (the legacy API): `load_environment()` returning a `MultiTurnEnv` over
spade's in-process sandbox, for the routes that load Hub environments that way (SkyRL's
`examples/train_integrations/verifiers`, NeMo-Gym's `verifiers_agent`).

    import verifiers as vf
    env = vf.load_environment("spade-verifiers", envs=["rlve:Multiplication"], seeds=[0, 1])

The dataset has one row per task (`envs` x `seeds`, or the rows of a JSON-lines `dataset`, as
`spade.verifiers` reads them): the prompt is the environment's first observation (a user
message), and each assistant reply is a step. The reward is the episode's return
(`spade_return`, the sum of the step rewards as `spade run` computes it). An episode ends when
the environment terminates or truncates; an exception of the environment, a contract error or
a sandbox limit ends it too, with the return so far, the reason as the last user message and
in the state (`spade_ended`, `spade_error`), and not as a rollout error.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import uuid

import verifiers as vf
from datasets import Dataset

from . import errors
from ._sources import resolve_source as _resolve_source


def _rows(envs, seeds, dataset):
    if dataset is not None:
        path = pathlib.Path(dataset)
        if not path.is_file():
            raise ValueError(f"dataset {dataset!r} does not exist")
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict) or "env" not in row:
                    raise ValueError(f"{dataset}:{number}: a row needs an \"env\" field")
                yield row
        return
    if not envs:
        raise ValueError("the spade environment needs a dataset or at least one entry in envs")
    for env, seed in itertools.product(envs, seeds):
        yield {"env": env, "seed": seed}


async def spade_return(state, **kwargs) -> float:
    """The episode's return."""
    return float(state.get("spade_return", 0.0))


class SpadeMultiTurnEnv(vf.MultiTurnEnv):
    """Each rollout plays its row's environment in its own sandbox."""

    def __init__(self, sources, runtime=None, **kwargs):
        super().__init__(**kwargs)
        self._sources = sources
        self._runtime = runtime
        self._open = {}

    def _load(self, info):
        if self._runtime is None:
            from . import default_runtime

            self._runtime = default_runtime()
        return self._runtime.load(self._sources[info["env"]], seed=info["seed"],
                                  max_turns=info.get("max_turns"))

    async def setup_state(self, state, **kwargs):
        info = state["info"]
        if isinstance(info, str):
            info = json.loads(info)
        key = uuid.uuid4().hex
        state["spade_key"], state["spade_return"] = key, 0.0
        state["spade_ended"], state["spade_error"] = None, None
        try:
            import asyncio

            env = await asyncio.to_thread(self._load, info)
            self._open[key] = env
            await env.areset(info["seed"])  # the prompt is this reset's observation
        except errors.SpadeError as err:
            self._end_with(state, err)
        return state

    def _end_with(self, state, err):
        state["spade_ended"], state["spade_error"] = err.kind, str(err)
        state["final_env_response"] = [{
            "role": "user", "content": f"The episode ended with an error ({err.kind}): {err.detail}",
        }]

    async def env_response(self, messages, state, **kwargs):
        env = self._open.get(state.get("spade_key"))
        reply = messages[-1]["content"] if messages else ""
        if not isinstance(reply, str):
            reply = "".join(part.get("text", "") for part in reply if isinstance(part, dict))
        try:
            obs, reward, terminated, truncated, _info = await env.astep(reply)
        except errors.SpadeError as err:
            self._end_with(state, err)
            return state["final_env_response"]
        state["spade_return"] += float(reward)
        response = [{"role": "user", "content": obs}]
        if terminated or truncated:
            state["spade_ended"] = "terminated" if terminated else "truncated"
            state["final_env_response"] = response
        return response

    @vf.cleanup
    async def close_sandbox(self, state, **kwargs):
        env = self._open.pop(state.get("spade_key"), None)
        if env is not None:
            try:
                await env.aclose()
            except errors.SpadeError:
                pass


def load_environment(envs=None, seeds=(0,), dataset=None, max_turns=None, runtime=None,
                     **kwargs):
    """The legacy `MultiTurnEnv`; `kwargs` go to `MultiTurnEnv` (e.g. `max_turns` of the
    conversation is the environment's own; a chat cap is `max_chat_turns`)."""
    if runtime is None:
        from . import default_runtime

        runtime = default_runtime()
    sources, rows = {}, []
    for row in _rows(list(envs or []), list(seeds), dataset):
        seed = row.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"a task's seed must be a non-negative integer, not {seed!r}")
        label = row["env"] if "\n" not in row["env"] else f"source{len(sources)}"
        if label not in sources:
            sources[label] = _resolve_source(row["env"])
        turns = row.get("max_turns", max_turns)
        with runtime.load(sources[label], seed=seed, max_turns=turns) as env:
            first, _ = env.reset(seed)
        rows.append({
            "prompt": [{"role": "user", "content": first}],
            "info": json.dumps({"env": label, "seed": seed, "max_turns": turns}),
        })
    chat_turns = kwargs.pop("max_chat_turns", -1)
    return SpadeMultiTurnEnv(
        sources, runtime=runtime, dataset=Dataset.from_list(rows), eval_dataset=None,
        rubric=vf.Rubric(funcs=[spade_return], weights=[1.0]), max_turns=chat_turns, **kwargs,
    )


__all__ = ["SpadeMultiTurnEnv", "load_environment", "spade_return"]
