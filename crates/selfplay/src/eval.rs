//! Held-out evaluation: play a fixed set of environments without hints and report win rate
//! per skill.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use spade_model::error::{ModelError, Result};
use spade_sandbox::{Runtime, SandboxOptions};

use super::lockstep::{self, LiveEpisode};
use super::policy::Policy;
use super::{prompts, rewards, seeds};

/// One held-out environment.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalEnv {
    /// Directory name.
    pub name: String,
    /// Skill (from `skill.txt`).
    pub skill: String,
    /// Source (`env.py`).
    pub source: String,
}

/// Reads `<dir>/<name>/env.py` and `<dir>/<name>/skill.txt` (default skill: the name), sorted.
pub fn load_envs(dir: &Path) -> Result<Vec<EvalEnv>> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io(format!("reading {}", dir.display()), e))?;
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let p = entry.path();
        let env = p.join("env.py");
        if !env.is_file() {
            continue;
        }
        let source = std::fs::read_to_string(&env)
            .map_err(|e| ModelError::io(format!("reading {}", env.display()), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let skill = std::fs::read_to_string(p.join("skill.txt"))
            .ok()
            .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| name.clone());
        out.push(EvalEnv {
            name,
            skill,
            source,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if out.is_empty() {
        return Err(ModelError::InvalidParameter(format!(
            "{} holds no <name>/env.py environments",
            dir.display()
        )));
    }
    Ok(out)
}

/// Win rate of one env.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvScore {
    /// Name.
    pub name: String,
    /// Skill.
    pub skill: String,
    /// Wins / plays.
    pub win_rate: f64,
    /// Mean return.
    pub mean_return: f64,
    /// Plays.
    pub plays: usize,
}

/// Plays one episode (no hint); returns the episode return.
pub async fn play_episode(
    runtime: &Runtime,
    policy: &mut dyn Policy,
    source: &str,
    seed: u64,
    max_turns: u32,
    max_new_tokens: usize,
) -> Result<f64> {
    let rets = play_episodes(runtime, policy, source, &[seed], max_turns, max_new_tokens).await?;
    Ok(rets[0])
}

/// Plays one episode per seed (no hint), all in lockstep ([`lockstep::play`], the loop
/// training uses). Returns the episode returns in seed order; an episode whose sandbox fails
/// to start or reset scores 0.
pub async fn play_episodes(
    runtime: &Runtime,
    policy: &mut dyn Policy,
    source: &str,
    seeds: &[u64],
    max_turns: u32,
    max_new_tokens: usize,
) -> Result<Vec<f64>> {
    let tool_use = source.contains("ToolUseBaseEnv");
    let mut live = Vec::with_capacity(seeds.len());
    let mut index = Vec::with_capacity(seeds.len());
    for (k, &seed) in seeds.iter().enumerate() {
        let opts = SandboxOptions {
            seed,
            max_turns: Some(max_turns),
        };
        if let Ok(mut sb) = runtime.sandbox(source, opts).await
            && let Ok(reset) = sb.reset(Some(seed)).await
        {
            let system = prompts::agent_system(tool_use);
            live.push(LiveEpisode::new(sb, &system, reset.observation, tool_use));
            index.push(k);
        }
    }
    let live_seeds: Vec<u64> = index.iter().map(|&k| seeds[k]).collect();
    lockstep::play(
        policy,
        &mut live,
        max_turns,
        max_new_tokens,
        |i, turn| seeds::derive(live_seeds[i], "eval", &[u64::from(turn)]),
        || {},
    )
    .await?;
    let mut rets = vec![0.0; seeds.len()];
    for (&k, e) in index.iter().zip(&live) {
        rets[k] = e.ret();
    }
    Ok(rets)
}

/// Plays every env `plays` times; scores per env and win rate per skill.
#[allow(clippy::too_many_arguments)]
pub async fn evaluate(
    runtime: &Runtime,
    policy: &mut dyn Policy,
    envs: &[EvalEnv],
    plays: usize,
    seed: u64,
    max_turns: u32,
    max_new_tokens: usize,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<EnvScore>, BTreeMap<String, f64>)> {
    let mut scores = Vec::new();
    for (k, env) in envs.iter().enumerate() {
        progress(&format!("eval {}/{}: {}", k + 1, envs.len(), env.name));
        let play_seeds: Vec<u64> = (0..plays)
            .map(|i| seeds::derive(seed, "eval-play", &[k as u64, i as u64]) % 1_000_000)
            .collect();
        let rets = play_episodes(
            runtime,
            policy,
            &env.source,
            &play_seeds,
            max_turns,
            max_new_tokens,
        )
        .await?;
        let wins: Vec<f64> = rets
            .iter()
            .map(|&r| f64::from(u8::from(rewards::is_win(r))))
            .collect();
        scores.push(EnvScore {
            name: env.name.clone(),
            skill: env.skill.clone(),
            win_rate: rewards::mean(&wins),
            mean_return: rewards::mean(&rets),
            plays,
        });
    }
    let mut per: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for s in &scores {
        per.entry(s.skill.clone()).or_default().push(s.win_rate);
    }
    let per = per
        .into_iter()
        .map(|(k, v)| (k, rewards::mean(&v)))
        .collect();
    Ok((scores, per))
}
