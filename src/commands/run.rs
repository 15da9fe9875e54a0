//! `spade run`: play an environment from the command line: actions from a file (one per line,
//! or one JSON string per line for actions with newlines) or typed interactively.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};
use spade_envtools::trajectory::{RecordMeta, ReplayOptions, branch_from};
use spade_envtools::{Cost, Costed, Episode, EpisodeError, Record};
use spade_sandbox::{CallError, CallOutput, Runtime, Sandbox, SandboxOptions};

use super::actions::{Format, InteractiveActions, read_actions};
use super::common::{leave_for_exit, one_episode_config, start_runtime};
use super::env_arg::EnvArg;
use super::{EXIT_ENV_FAILED, one_task_executor};

/// Run an environment in the sandbox: reset, then one step per action; or, with `--from`,
/// go on from a call of a recorded episode with other actions.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The environment: a Python file defining one class whose name ends in `Env`;
    /// `rlve:NAME`, an environment of RLVE (`pip install rlve-gym`; `$SPADE_RLVE_DIR` names
    /// the directory holding `Gym/` if python3 cannot import it); or, with --package, an entry
    /// point `module:Class` of that package. Not given with --from.
    #[arg(value_name = "ENV", required_unless_present = "from")]
    pub env: Option<String>,
    /// A directory of Python modules (or a package directory, with its `__init__.py`) that the
    /// environment is imported from. Its modules are bundled into the environment's source,
    /// read-only: the sandbox still reads no files.
    #[arg(long, value_name = "DIR", conflicts_with = "from")]
    pub package: Option<PathBuf>,
    /// Go on from a recorded episode instead of a new one: replay the first N calls of the
    /// trajectory file (0 is the load, 1 the reset, 1 + k step k; each compared with the
    /// recording), fork the episode there and play the actions from it. With --record, the
    /// branch's file names the trajectory as its parent, and `spade replay` replays both.
    #[arg(
        long,
        value_name = "TRAJECTORY@N",
        conflicts_with_all = ["env", "seed", "difficulty", "max_turns", "no_snapshots"]
    )]
    pub from: Option<String>,
    /// With --from: seed the branch's WASI entropy and module-global `random` anew at the
    /// fork, so that it draws other numbers than the recording did.
    #[arg(long, value_name = "SEED", requires = "from")]
    pub reseed: Option<u64>,
    /// Seed for the sandbox and for `reset(seed=...)`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Passed to `reset` as `difficulty=` (RLVE environments: the parameter controller's level,
    /// from 0).
    #[arg(long, value_name = "N")]
    pub difficulty: Option<u64>,
    /// Passed to the environment's constructor as `max_turns=`.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Actions, one per line: a file, or `-` for standard input. Without it (and without
    /// `--actions-jsonl`), actions are read interactively from standard input, one per line, or
    /// several lines between a line `<<<` and a line `>>>` as one action.
    #[arg(long, value_name = "FILE|-", conflicts_with = "actions_jsonl")]
    pub actions: Option<String>,
    /// Actions as JSON Lines, one JSON string per line (blank lines skipped): a file, or `-`
    /// for standard input. For actions with newlines (a pretty-printed tool call, a code
    /// answer, a multi-line plan).
    #[arg(long, value_name = "FILE|-")]
    pub actions_jsonl: Option<String>,
    /// Print one JSON object per call instead of human-readable text.
    #[arg(long)]
    pub json: bool,
    /// Write the episode to this trajectory file (JSON Lines), replayable with `spade replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Run the source in the sandbox instead of starting from a snapshot of the loaded
    /// environment. The results are the same; this is for checking that they are.
    #[arg(long)]
    pub no_snapshots: bool,
}

/// Where actions come from.
enum Actions {
    /// All actions known up front (a file or piped stdin).
    List(Vec<String>),
    /// Read one action at a time from stdin, prompting when it is a terminal.
    Interactive,
}

impl RunArgs {
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        let actions = self.actions()?;
        if let Some(from) = &self.from {
            let (path, at) = parse_from(from)?;
            let runtime = start_runtime(one_episode_config(true))?;
            let (code, sandbox) =
                one_task_executor()?.block_on(self.branch(&runtime, &path, at, actions))?;
            leave_for_exit(sandbox, runtime);
            return Ok(code);
        }
        let env = EnvArg {
            env: self.env.clone().expect("clap requires ENV without --from"),
            package: self.package.clone(),
        };
        let source = env.source()?;
        let runtime = start_runtime(one_episode_config(!self.no_snapshots))?;
        let (code, sandbox) =
            one_task_executor()?.block_on(self.play(&runtime, &source, actions))?;
        leave_for_exit(sandbox, runtime);
        Ok(code)
    }

    fn actions(&self) -> anyhow::Result<Actions> {
        match (&self.actions, &self.actions_jsonl) {
            (Some(source), _) => Ok(Actions::List(read_actions(source, Format::Lines)?)),
            (None, Some(source)) => Ok(Actions::List(read_actions(source, Format::JsonLines)?)),
            (None, None) => Ok(Actions::Interactive),
        }
    }

    /// The trajectory file `--record` names, opened.
    fn record(&self) -> anyhow::Result<Record> {
        Ok(match &self.record {
            Some(path) => Record::to(
                std::io::BufWriter::new(std::fs::File::create(path).with_context(|| {
                    format!("cannot create trajectory file '{}'", path.display())
                })?),
                RecordMeta::default(),
            ),
            None => Record::Off,
        })
    }

    /// `--from`: the recorded episode's first `at` calls replayed, forked, and played on.
    async fn branch(
        &self,
        runtime: &Runtime,
        path: &Path,
        at: u64,
        actions: Actions,
    ) -> anyhow::Result<(ExitCode, Option<Sandbox>)> {
        let record = (self.record()?, self.record.as_deref());
        let options = ReplayOptions::default();
        let mut episode = branch_from(runtime, path, at, self.reseed, record, &options)
            .await
            .with_context(|| format!("--from {}@{at}", path.display()))?;
        let mut out = Printer { json: self.json };
        out.branched(path, at, self.reseed);
        let code = self.steps(&mut episode, &mut out, actions).await?;
        let finished = episode.finish().context("writing the trajectory")?;
        Ok((code, finished.sandbox))
    }

    async fn play(
        &self,
        runtime: &Runtime,
        source: &str,
        actions: Actions,
    ) -> anyhow::Result<(ExitCode, Option<Sandbox>)> {
        let record = self.record()?;
        let mut out = Printer { json: self.json };
        let options = SandboxOptions {
            seed: self.seed,
            max_turns: self.max_turns,
        };
        let mut episode = Episode::start(runtime, source, options, record)
            .await
            .context("writing the trajectory")?;
        let code = self.episode(&mut episode, &mut out, actions).await?;
        let finished = episode.finish().context("writing the trajectory")?;
        Ok((code, finished.sandbox))
    }

    async fn episode(
        &self,
        episode: &mut Episode,
        out: &mut Printer,
        actions: Actions,
    ) -> anyhow::Result<ExitCode> {
        match episode.info() {
            Ok(info) => out.loaded(&info.class_name, episode.load_cost().fuel),
            Err(err) => return out.failure("load", None, err, &Cost::default()),
        }
        let Costed { result, cost } = episode.reset_at(Some(self.seed), self.difficulty).await;
        let reset = match result {
            Ok(value) => value,
            Err(EpisodeError::NoDifficulty) => {
                bail!("--difficulty: this environment's reset() takes no `difficulty` argument")
            }
            Err(err) => return out.failure("reset", None, &call_error(err)?, &cost),
        };
        out.reset(self.seed, &reset.observation, &reset.info, &cost);
        self.steps(episode, out, actions).await
    }

    /// Plays `actions` as steps until the episode ends or they run out.
    async fn steps(
        &self,
        episode: &mut Episode,
        out: &mut Printer,
        actions: Actions,
    ) -> anyhow::Result<ExitCode> {
        let mut lines: Box<dyn Iterator<Item = anyhow::Result<String>>> = match actions {
            Actions::List(list) => Box::new(list.into_iter().map(Ok)),
            Actions::Interactive => Box::new(InteractiveActions::new()),
        };
        let mut total = 0.0;
        let mut steps = 0usize;
        while let Some(action) = lines.next() {
            let action = action?;
            steps += 1;
            let Costed { result, cost } = episode.step(&action).await;
            let step = match result {
                Ok(step) => step,
                Err(err) => {
                    let err = call_error(err)?;
                    return out.failure("step", Some((steps, &action)), &err, &cost);
                }
            };
            total += step.reward;
            out.step(steps, &action, &step, &cost);
            if step.terminated || step.truncated {
                let unused = lines.size_hint().0;
                out.finished(steps, total, step.terminated, unused);
                return Ok(ExitCode::SUCCESS);
            }
        }
        out.unfinished(steps, total);
        Ok(ExitCode::SUCCESS)
    }
}

/// `TRAJECTORY@N` of `--from`.
fn parse_from(text: &str) -> anyhow::Result<(PathBuf, u64)> {
    let parsed = text
        .rsplit_once('@')
        .and_then(|(path, at)| Some((path, at.parse::<u64>().ok()?)))
        .filter(|(path, _)| !path.is_empty());
    match parsed {
        Some((path, at)) => Ok((PathBuf::from(path), at)),
        None => bail!(
            "--from {text:?}: expected TRAJECTORY@N, a trajectory file and the number of its \
             calls to replay before the branch (2 goes on after the reset)"
        ),
    }
}

/// The sandbox error inside an episode's error; a trajectory that cannot be written is a
/// command error.
fn call_error(err: EpisodeError) -> anyhow::Result<CallError> {
    match err {
        EpisodeError::Call(err) => Ok(err),
        other => Err(anyhow::Error::new(other)),
    }
}

/// Prints calls as text or as one JSON object per line.
struct Printer {
    json: bool,
}

fn info_value(info: &str) -> Value {
    serde_json::from_str(info).unwrap_or(Value::String(info.to_owned()))
}

impl Printer {
    fn emit(&self, value: Value) {
        say!("{value}");
    }

    fn output(&self, object: &mut Value, output: &CallOutput) {
        if self.json {
            if !output.stdout.is_empty() {
                object["stdout"] = json!(output.stdout);
            }
            if !output.stderr.is_empty() {
                object["stderr"] = json!(output.stderr);
            }
            if output.dropped_bytes > 0 {
                object["output_dropped_bytes"] = json!(output.dropped_bytes);
            }
        } else {
            for line in output.stdout.lines() {
                eprintln!("[env stdout] {line}");
            }
            for line in output.stderr.lines() {
                eprintln!("[env stderr] {line}");
            }
            if output.dropped_bytes > 0 {
                eprintln!(
                    "[env output] {} more bytes were printed and dropped",
                    output.dropped_bytes
                );
            }
        }
    }

    fn loaded(&mut self, class_name: &str, fuel: u64) {
        if self.json {
            self.emit(json!({"call": "load", "class": class_name, "fuel": fuel}));
        } else {
            say!("== loaded {class_name}");
        }
    }

    fn branched(&mut self, path: &Path, at: u64, reseed: Option<u64>) {
        if self.json {
            self.emit(json!({"call": "fork", "from": path.display().to_string(), "at": at, "reseed": reseed}));
        } else {
            let reseeded = reseed
                .map(|s| format!(", reseeded with {s}"))
                .unwrap_or_default();
            say!(
                "== branched from {} after its first {at} calls{reseeded}",
                path.display()
            );
        }
    }

    fn reset(&mut self, seed: u64, observation: &str, info: &str, cost: &Cost) {
        let (fuel, output) = (cost.fuel, &cost.output);
        if self.json {
            let mut object = json!({"call": "reset", "seed": seed, "observation": observation, "info": info_value(info), "fuel": fuel});
            self.output(&mut object, output);
            self.emit(object);
        } else {
            self.output(&mut Value::Null, output);
            say!("== reset (seed {seed})\n{observation}");
        }
    }

    fn step(&mut self, index: usize, action: &str, step: &spade_sandbox::Step, cost: &Cost) {
        let (fuel, output) = (cost.fuel, &cost.output);
        if self.json {
            let mut object = json!({
                "call": "step", "index": index, "action": action, "observation": step.observation,
                "reward": step.reward, "terminated": step.terminated, "truncated": step.truncated,
                "info": info_value(&step.info), "fuel": fuel,
            });
            self.output(&mut object, output);
            self.emit(object);
        } else {
            self.output(&mut Value::Null, output);
            say!("== step {index}: {action}\n{}", step.observation);
            say!(
                "reward {}  terminated {}  truncated {}",
                step.reward,
                step.terminated,
                step.truncated
            );
        }
    }

    fn finished(&mut self, steps: usize, total: f64, terminated: bool, unused: usize) {
        let how = if terminated {
            "terminated"
        } else {
            "truncated"
        };
        if self.json {
            self.emit(json!({"call": "end", "steps": steps, "total_reward": total, "ended": how, "unused_actions": unused}));
        } else {
            say!("== episode {how} after {steps} steps, total reward {total}");
            if unused > 0 {
                say!("({unused} remaining actions were not used)");
            }
        }
    }

    fn unfinished(&mut self, steps: usize, total: f64) {
        if self.json {
            self.emit(json!({"call": "end", "steps": steps, "total_reward": total, "ended": "actions_exhausted"}));
        } else {
            say!("== no more actions after {steps} steps (episode not over), total reward {total}");
        }
    }

    fn failure(
        &mut self,
        call: &str,
        step: Option<(usize, &str)>,
        err: &CallError,
        cost: &Cost,
    ) -> anyhow::Result<ExitCode> {
        let (fuel, output) = (cost.fuel, &cost.output);
        if self.json {
            let mut object = json!({"call": call, "error": {"kind": err.kind().as_str(), "message": err.detail()}, "fuel": fuel});
            if let Some((index, action)) = step {
                object["index"] = json!(index);
                object["action"] = json!(action);
            }
            self.output(&mut object, output);
            self.emit(object);
        } else {
            self.output(&mut Value::Null, output);
            let at = match step {
                Some((index, action)) => format!("step {index} ({action})"),
                None => call.to_owned(),
            };
            eprintln!("error in {at}: {}: {}", err.kind(), err.detail());
        }
        Ok(ExitCode::from(EXIT_ENV_FAILED))
    }
}
