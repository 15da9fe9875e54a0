"""verifiers (0.4, the v1 API): a `Taskset` of sandboxed environments and the `Env` that plays
them, on the pattern of verifiers' own TextArena and OpenEnv tasksets.

    vf-eval spade-verifiers --env.taskset.envs '["rlve:Multiplication"]' \\
        --env.taskset.seeds '[0,1,2,3]' -m MODEL --client.base-url URL

The taskset (id `spade-verifiers`, the package in python/verifiers_env, or this module's
classes directly) reads its tasks from a dataset: a JSON-lines file (`dataset`) whose rows are
`{"env": ..., "seed": ..., "max_turns": ...}`, or the product of `envs` and `seeds`. `env` is
a `spade run` name (`rlve:NAME`), a path to an environment file (`*.py`), or the source text.

Each rollout loads the environment into its own in-process sandbox; `run()` opens the player's
interaction, sends the first observation, and steps the environment with each reply
(`await env.astep`) until it terminates or truncates, the player stops, or the environment
fails. The return (the sum of the step rewards, as `spade run` totals them) is the trace's
reward `spade_return`. An exception of the environment, a contract error or a sandbox limit
ends the episode with the return so far: `trace.info["spade_ended"]` names how the episode
ended (`terminated`, `truncated`, `player_stopped`, or the error's kind) and
`trace.info["spade_error"]` carries the error text; the rollout itself does not fail.

Install with `pip install spade-python[verifiers]`.
"""

from __future__ import annotations

import itertools
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from . import errors
from ._sources import resolve_source

REWARD = "spade_return"
"""The name of the reward each trace records: the episode's return."""


class SpadeTasksetConfig(vf.TasksetConfig):
    """Where the tasks come from: `dataset` (a JSON-lines file of rows), else every pair of
    `envs` and `seeds`."""

    dataset: str | None = None
    """A JSON-lines file; each row `{"env": ..., "seed": 0, "max_turns": null, "name": null}`."""
    envs: list[str] = Field(default_factory=list)
    """Environments (`rlve:NAME`, a `.py` path, or source text), played at every seed."""
    seeds: list[int] = Field(default_factory=lambda: [0])
    """Seeds of the sandbox and of `reset` (as `spade run --seed`)."""
    max_turns: int | None = None
    """Passed to each environment's constructor (a row's own `max_turns` wins)."""


class SpadeData(vf.TaskData):
    info: dict
    """`source`, `seed`, `max_turns` and `env` (the row's name for the environment)."""


class SpadeTask(vf.Task[SpadeData, vf.State, vf.TaskConfig]):
    pass


def _rows(config: SpadeTasksetConfig) -> Iterator[dict[str, Any]]:
    if config.dataset is not None:
        path = pathlib.Path(config.dataset)
        if not path.is_file():
            raise ValueError(f"dataset {config.dataset!r} does not exist")
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{config.dataset}:{number}: not JSON: {err}") from None
            if not isinstance(row, dict) or "env" not in row:
                raise ValueError(f"{config.dataset}:{number}: a row needs an \"env\" field")
            yield row
        return
    if not config.envs:
        raise ValueError("the spade taskset needs a dataset or at least one entry in envs")
    for env, seed in itertools.product(config.envs, config.seeds):
        yield {"env": env, "seed": seed}


class SpadeTaskset(vf.Taskset[SpadeTask, SpadeTasksetConfig]):
    """One task per dataset row: an environment and a seed."""

    def load(self) -> Iterator[SpadeTask]:
        for row in _rows(self.config):
            seed = row.get("seed", 0)
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ValueError(f"a task's seed must be a non-negative integer, not {seed!r}")
            max_turns = row.get("max_turns", self.config.max_turns)
            source = resolve_source(row["env"])
            label = row["env"] if "\n" not in row["env"] else "source"
            yield SpadeTask(
                SpadeData(
                    name=row.get("name") or f"{label}#{seed}",
                    prompt=None,
                    info={"env": label, "source": source, "seed": seed, "max_turns": max_turns},
                ),
                self.config.task,
            )


class SpadeEnvConfig(vf.EnvConfig):
    # The plain chat loop on this machine: the environment is the only tool.
    player: vf.AgentConfig = vf.AgentConfig.model_validate(
        {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}
    )


async def play(task, agents, runtime=None):
    """One episode of `task` with the player of `agents`; records the return on the trace.
    Returns `(return, ended)`."""
    from . import default_runtime

    runtime = runtime if runtime is not None else default_runtime()
    info = task.data.info
    total, ended, error = 0.0, None, None
    env, obs = None, None
    try:
        import asyncio

        env = await asyncio.to_thread(runtime.load, info["source"], seed=info["seed"],
                                      max_turns=info.get("max_turns"))
        obs, _ = await env.areset(info["seed"])
    except errors.SpadeError as err:
        ended, error = err.kind, str(err)
    async with agents.player.interaction(task) as interaction:
        if ended is None:
            segment = await interaction.turn(obs)
            while True:
                if segment.terminated:
                    ended = "player_stopped"
                    break
                try:
                    obs, reward, terminated, truncated, _ = await env.astep(segment.last_reply)
                except errors.SpadeError as err:
                    ended, error = err.kind, str(err)
                    break
                total += float(reward)
                if terminated or truncated:
                    ended = "terminated" if terminated else "truncated"
                    break
                segment = await interaction.turn(obs)
        if error is not None:
            interaction.trace.stop(f"spade_{ended}")
    trace = interaction.trace
    trace.record_reward(REWARD, total)
    trace.info["spade_ended"] = ended
    if error is not None:
        trace.info["spade_error"] = error
    if env is not None:
        try:
            await env.aclose()
        except errors.SpadeError:
            pass
    return total, ended


class SpadeVerifiersEnv(vf.Env[SpadeEnvConfig]):
    """Plays each task's environment with the player agent (see the module's documentation)."""

    async def run(self, task, agents):
        await play(task, agents)


def load_environment(envs=None, seeds=(0,), dataset=None, max_turns=None, **env_config):
    """The environment as verifiers' loader builds it: a `SpadeVerifiersEnv` over a
    `SpadeTaskset` (taskset id `spade-verifiers`)."""
    taskset = SpadeTasksetConfig(id="spade-verifiers", envs=list(envs or []),
                                 seeds=list(seeds), dataset=dataset, max_turns=max_turns)
    return SpadeVerifiersEnv(SpadeEnvConfig(taskset=taskset, **env_config))


__all__ = ["SpadeTaskset", "SpadeVerifiersEnv", "SpadeTasksetConfig", "SpadeEnvConfig",
           "SpadeData", "SpadeTask", "play", "load_environment", "resolve_source", "REWARD"]
