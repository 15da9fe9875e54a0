//! Held-out evaluation: play a fixed set of environments without hints and report win rate
//! per skill.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use spade_runtime::{Runtime, SandboxOptions};

use super::policy::{Policy, Role};
use super::{extract, prompts, rewards, seeds};
use crate::chat::Message;
use crate::error::{Result, TrainerError};

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
        .map_err(|e| TrainerError::io(format!("reading {}", dir.display()), e))?;
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let p = entry.path();
        let env = p.join("env.py");
        if !env.is_file() {
            continue;
        }
        let source = std::fs::read_to_string(&env)
            .map_err(|e| TrainerError::io(format!("reading {}", env.display()), e))?;
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
        return Err(TrainerError::InvalidParameter(format!(
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
    let tool_use = source.contains("ToolUseBaseEnv");
    let opts = SandboxOptions {
        seed,
        max_turns: Some(max_turns),
    };
    let Ok(mut sb) = runtime.sandbox(source, opts).await else {
        return Ok(0.0);
    };
    let Ok(reset) = sb.reset(Some(seed)).await else {
        return Ok(0.0);
    };
    let mut messages = vec![
        Message::new("system", prompts::agent_system(tool_use)),
        Message::new("user", reset.observation),
    ];
    for turn in 0..max_turns {
        let s = policy
            .sample(
                Role::Agent,
                &messages,
                1,
                max_new_tokens,
                seeds::derive(seed, "eval", &[u64::from(turn)]),
            )?
            .into_iter()
            .next()
            .unwrap_or_else(|| super::policy::Sampled {
                prompt: vec![],
                tokens: vec![],
                logprobs: vec![],
                text: String::new(),
            });
        let action = extract::action(&s.text, tool_use);
        messages.push(Message::new("assistant", s.text));
        match sb.step(&action).await {
            Ok(step) if step.terminated => {
                return Ok(rewards::episode_return(Some(step.reward), true));
            }
            Ok(step) if step.truncated => return Ok(0.0),
            Ok(step) => messages.push(Message::new("user", step.observation)),
            Err(_) => return Ok(0.0),
        }
    }
    Ok(0.0)
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
        let mut rets = Vec::new();
        for i in 0..plays {
            let s = seeds::derive(seed, "eval-play", &[k as u64, i as u64]) % 1_000_000;
            rets.push(
                play_episode(runtime, policy, &env.source, s, max_turns, max_new_tokens).await?,
            );
        }
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
