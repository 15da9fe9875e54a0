//! What a run keeps between rollouts, and atomic checkpoints of it.
use std::path::{Path, PathBuf};

use super::error::{Result, TrainError};
use serde::{Deserialize, Serialize};

use super::credit::Baselines;
use super::delay::DesignerBuffer;
use super::difficulty::DifficultyState;
use super::memory::EnvMemory;
use super::prompts::Variant;

/// An environment in the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolEnv {
    /// Stable id (`env00012`).
    pub id: String,
    /// Python source.
    pub source: String,
    /// Class name found by validation.
    pub class_name: String,
    /// Target skill.
    pub skill: String,
    /// Difficulty.
    pub difficulty: String,
    /// Kind requested from the designer (`None` for starter environments).
    pub variant: Option<Variant>,
    /// Corpus document the design was grounded in.
    pub doc_id: Option<usize>,
    /// Whether it is a tool-use env.
    pub tool_use: bool,
    /// The hint, or `None` when hint generation failed.
    pub hint: Option<String>,
    /// Rollout that added it.
    pub created: u64,
    /// `designed`, `seed:<name>` (a starter environment, [`crate::starter_envs::STARTER_ORIGIN`])
    /// or `fixed:<name>` (fixed-env training).
    pub origin: String,
    /// The design record (prompt, completions, repairs), relative to the run directory.
    pub design_file: Option<String>,
    /// Set when a play hit a fuel or deadline limit: never played again.
    pub banned: bool,
}

/// The run's state after a rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Rollouts completed.
    pub rollouts_done: u64,
    /// Environments.
    pub pool: Vec<PoolEnv>,
    /// Environment memory.
    pub memory: EnvMemory,
    /// Next env number.
    pub next_env: u64,
    /// Length in bytes of `metrics.jsonl` at this checkpoint.
    pub metrics_len: u64,
    /// Per-game agent baselines carried between rollouts (EMA credit assignment).
    #[serde(default)]
    pub baselines: Baselines,
    /// Designer samples held until they train, with their environments' plays so far.
    #[serde(default)]
    pub designer_buffer: DesignerBuffer,
    /// Fixed-env training: every environment's difficulty controller state.
    #[serde(default)]
    pub difficulty: DifficultyState,
    /// Fixed-env training: the pool indices chosen at the last selection.
    #[serde(default)]
    pub fixed_selection: Vec<usize>,
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| TrainError::file("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::file("renaming to", path, e))
}

/// `checkpoints/` under a run directory.
pub fn checkpoints_dir(run: &Path) -> PathBuf {
    run.join("checkpoints")
}

/// The directory named by `checkpoints/latest`, if there is a complete checkpoint.
pub fn latest_checkpoint(run: &Path) -> Option<PathBuf> {
    let dir = checkpoints_dir(run);
    let name = std::fs::read_to_string(dir.join("latest")).ok()?;
    let path = dir.join(name.trim());
    path.join("state.json").exists().then_some(path)
}

/// Reads a checkpoint's `state.json`.
pub fn load_state(ckpt: &Path) -> Result<RunState> {
    let p = ckpt.join("state.json");
    let text = std::fs::read_to_string(&p).map_err(|e| TrainError::file("reading", &p, e))?;
    serde_json::from_str(&text).map_err(|source| TrainError::Json {
        context: format!("parsing {}", p.display()),
        source,
    })
}

/// Writes a checkpoint: `save_policy` fills `policy/`, then `state.json`; the directory is
/// built under a temporary name, renamed, and only then named in `checkpoints/latest`. A
/// failure is a [`TrainError::Checkpoint`] that names the checkpoint and what failed in it.
pub fn save_checkpoint(
    run: &Path,
    state: &RunState,
    save_policy: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let dir = checkpoints_dir(run);
    let name = format!("rollout-{:06}", state.rollouts_done);
    let final_dir = dir.join(&name);
    write_checkpoint(run, state, save_policy, &name)
        .map_err(|e| e.in_checkpoint("writing", &final_dir))?;
    Ok(final_dir)
}

fn write_checkpoint(
    run: &Path,
    state: &RunState,
    save_policy: impl FnOnce(&Path) -> Result<()>,
    name: &str,
) -> Result<()> {
    let dir = checkpoints_dir(run);
    let final_dir = dir.join(name);
    let tmp = dir.join(format!("{name}.partial"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::file("creating", &tmp, e))?;
    save_policy(&tmp.join("policy"))?;
    let text = serde_json::to_string_pretty(state).map_err(|source| TrainError::Json {
        context: "serialising the run state".into(),
        source,
    })?;
    let state_file = tmp.join("state.json");
    std::fs::write(&state_file, text).map_err(|e| TrainError::file("writing", &state_file, e))?;
    let _ = std::fs::remove_dir_all(&final_dir);
    std::fs::rename(&tmp, &final_dir)
        .map_err(|e| TrainError::file("renaming to", &final_dir, e))?;
    write_atomic(&dir.join("latest"), name.as_bytes())?;
    state.memory.save(&run.join("env_memory.json"))
}
