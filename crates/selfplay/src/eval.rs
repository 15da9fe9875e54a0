//! Held-out evaluation: play a fixed set of environments without hints and report each one's
//! win rate with a 95% confidence interval (Wilson), and the win rate per skill.
//!
//! Seeds are held out: evaluation plays seeds below [`EVAL_SEED_LIMIT`] (10^6), and
//! fixed-env training draws its problem seeds from `[2^30, 2^31)`, so an evaluation of a
//! training environment never replays a training problem.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use spade_envtools::{Episode, EpisodeError, Record};
use spade_sandbox::{Runtime, SandboxOptions};

use super::error::{Result, TrainError};
use super::lockstep::{self, LiveEpisode};
use super::policy::Policy;
use super::prompts::AgentExample;
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
    /// The difficulty passed to `reset` (`None`: reset takes only the seed).
    pub difficulty: Option<u64>,
}

/// Evaluation seeds are below this; fixed-env training's problem seeds are at least 2^30.
pub const EVAL_SEED_LIMIT: u64 = 1_000_000;

/// The 95% Wilson score interval of `wins` successes in `plays` trials (`(0, 1)` for none).
pub fn wilson(wins: usize, plays: usize) -> (f64, f64) {
    if plays == 0 {
        return (0.0, 1.0);
    }
    const Z: f64 = 1.959_963_984_540_054;
    let n = plays as f64;
    let p = wins as f64 / n;
    let z2 = Z * Z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Reads `<dir>/<name>/env.py` and `<dir>/<name>/skill.txt` (default skill: the name), sorted.
pub fn load_envs(dir: &Path) -> Result<Vec<EvalEnv>> {
    let rd = std::fs::read_dir(dir).map_err(|e| TrainError::file("reading", dir, e))?;
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let p = entry.path();
        let env = p.join("env.py");
        if !env.is_file() {
            continue;
        }
        let source =
            std::fs::read_to_string(&env).map_err(|e| TrainError::file("reading", &env, e))?;
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
            difficulty: None,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if out.is_empty() {
        return Err(TrainError::Environment(format!(
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
    /// The difficulty played, if the environment takes one.
    pub difficulty: Option<u64>,
    /// Plays won.
    pub wins: usize,
    /// Wins / plays.
    pub win_rate: f64,
    /// The 95% Wilson interval of the win rate: low end.
    pub ci_low: f64,
    /// High end.
    pub ci_high: f64,
    /// Mean return.
    pub mean_return: f64,
    /// Plays.
    pub plays: usize,
}

/// How the agent plays an evaluation episode.
#[derive(Debug, Clone, Copy)]
pub struct PlaySettings<'a> {
    /// Most turns per episode (passed to the environment as `max_turns`).
    pub max_turns: u32,
    /// Agent tokens per turn.
    pub max_new_tokens: usize,
    /// Worked exchanges before the first observation (training's `agent_examples`).
    pub examples: &'a [AgentExample],
}

/// Plays one episode (no hint); returns the episode return.
pub async fn play_episode(
    runtime: &Runtime,
    policy: &mut dyn Policy,
    source: &str,
    seed: u64,
    settings: PlaySettings<'_>,
) -> Result<f64> {
    let rets = play_episodes(runtime, policy, source, None, &[seed], settings).await?;
    Ok(rets[0])
}

/// Plays one episode per seed (no hint), all in lockstep ([`lockstep::play`], the loop
/// training uses), each reset with `difficulty` when given. Returns the episode returns in
/// seed order; an episode whose sandbox fails to start or reset scores 0.
pub async fn play_episodes(
    runtime: &Runtime,
    policy: &mut dyn Policy,
    source: &str,
    difficulty: Option<u64>,
    seeds: &[u64],
    settings: PlaySettings<'_>,
) -> Result<Vec<f64>> {
    let PlaySettings {
        max_turns,
        max_new_tokens,
        examples,
    } = settings;
    let tool_use = source.contains("ToolUseBaseEnv");
    let mut live = Vec::with_capacity(seeds.len());
    let mut index = Vec::with_capacity(seeds.len());
    for (k, &seed) in seeds.iter().enumerate() {
        let opts = SandboxOptions {
            seed,
            max_turns: Some(max_turns),
        };
        let Ok(mut sb) = Episode::start(runtime, source, opts, Record::Off).await else {
            continue;
        };
        if sb.info().is_err() {
            continue;
        }
        let reset = match sb.reset_at(Some(seed), difficulty).await.result {
            Err(EpisodeError::NoDifficulty) => {
                return Err(TrainError::Environment(
                    "a difficulty was given, but the environment's reset() takes no \
                     `difficulty`"
                        .into(),
                ));
            }
            other => other,
        };
        if let Ok(reset) = reset {
            let system = prompts::agent_system(tool_use);
            live.push(LiveEpisode::new(
                sb,
                &system,
                examples,
                reset.observation,
                tool_use,
            ));
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
pub async fn evaluate(
    runtime: &Runtime,
    policy: &mut dyn Policy,
    envs: &[EvalEnv],
    plays: usize,
    seed: u64,
    settings: PlaySettings<'_>,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<EnvScore>, BTreeMap<String, f64>)> {
    let mut scores = Vec::new();
    for (k, env) in envs.iter().enumerate() {
        progress(&format!("eval {}/{}: {}", k + 1, envs.len(), env.name));
        let play_seeds: Vec<u64> = (0..plays)
            .map(|i| seeds::derive(seed, "eval-play", &[k as u64, i as u64]) % EVAL_SEED_LIMIT)
            .collect();
        let rets = play_episodes(
            runtime,
            policy,
            &env.source,
            env.difficulty,
            &play_seeds,
            settings,
        )
        .await?;
        let wins: Vec<f64> = rets
            .iter()
            .map(|&r| f64::from(u8::from(rewards::is_win(r))))
            .collect();
        let won = rets.iter().filter(|&&r| rewards::is_win(r)).count();
        let (ci_low, ci_high) = wilson(won, plays);
        scores.push(EnvScore {
            name: env.name.clone(),
            skill: env.skill.clone(),
            difficulty: env.difficulty,
            wins: won,
            ci_low,
            ci_high,
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

#[cfg(test)]
mod tests {
    use super::wilson;

    #[test]
    fn wilson_intervals_match_the_formula_computed_by_hand() {
        // p = 0.5, n = 10: centre 0.5, half-width 1.96 sqrt(0.025 + 0.0096) / 1.384 = 0.2634.
        let (lo, hi) = wilson(5, 10);
        assert!(
            (lo - 0.236_593).abs() < 1e-6 && (hi - 0.763_407).abs() < 1e-6,
            "{lo} {hi}"
        );
        // No wins in 64: [0, z^2 / (n + z^2)] = [0, 3.8415 / 67.8415].
        let (lo, hi) = wilson(0, 64);
        assert_eq!(lo, 0.0);
        assert!((hi - 3.841_459 / 67.841_459).abs() < 1e-6, "{hi}");
        let (lo, hi) = wilson(64, 64);
        assert!((lo - 0.943_376).abs() < 1e-6 && hi == 1.0, "{lo}");
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }
}
