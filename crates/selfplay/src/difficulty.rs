//! Difficulty control for fixed-environment training, as the SPADE reference's fixed-env mode
//! runs it (`spade/core/difficulty_controller.py`): pure functions of typed state, seeded, so
//! a resumed run continues exactly.
//!
//! - **Sliding window** (RLVE's): each environment keeps a window `[low, high]` of difficulties,
//!   and every play samples one uniformly from it. Plays at `high` are counted; once `tau_num`
//!   of them have been played, `high` rises by one if at least `tau_acc` of them were won, and
//!   the count starts again either way. `low` follows so the window is at most `d_delta` wide.
//! - **Learning potential** (SPADE's): each environment keeps a fast and a slow exponential
//!   average of its rewards; the environments played are those where the two differ most
//!   (the learning frontier), half of them, the other half drawn at random. The difficulty is
//!   fixed (`lp_difficulty`).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::seeds;

/// Which controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControllerKind {
    /// RLVE's sliding window (the reference's default, `--spade-difficulty-variant sliding_window`).
    SlidingWindow,
    /// SPADE's learning-potential selection (`lp`).
    LearningPotential,
}

/// The controller's settings (the `[difficulty]` table of the config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DifficultyConfig {
    /// Which controller.
    pub controller: ControllerKind,
    /// Sliding window: win rate at `high` that promotes (reference: 0.9).
    pub tau_acc: f64,
    /// Sliding window: plays at `high` per promotion check (the reference's class default 8;
    /// its 4B script uses 128 with 16 plays per step on GPUs).
    pub tau_num: u32,
    /// Sliding window: most difficulties in the window (reference: 4).
    pub d_delta: u64,
    /// Highest difficulty (reference: 20).
    pub max_difficulty: u64,
    /// Learning potential: fast average's weight of a new reward (reference: 0.35).
    pub gamma_fast: f64,
    /// Learning potential: slow average's weight (reference: 0.15).
    pub gamma_slow: f64,
    /// Learning potential: the difficulty every play uses (reference: 1).
    pub lp_difficulty: u64,
    /// The environments played are chosen again every this many rollouts (reference: 8).
    pub select_interval: u64,
}

impl Default for DifficultyConfig {
    fn default() -> Self {
        Self {
            controller: ControllerKind::SlidingWindow,
            tau_acc: 0.9,
            tau_num: 8,
            d_delta: 4,
            max_difficulty: 20,
            gamma_fast: 0.35,
            gamma_slow: 0.15,
            lp_difficulty: 1,
            select_interval: 8,
        }
    }
}

impl DifficultyConfig {
    /// Why the settings cannot work, if they cannot.
    pub fn problem(&self) -> Option<String> {
        if !(0.0..=1.0).contains(&self.tau_acc) {
            return Some(format!(
                "difficulty.tau_acc must be in [0, 1], not {}",
                self.tau_acc
            ));
        }
        if self.tau_num == 0 {
            return Some("difficulty.tau_num must be at least 1".into());
        }
        if self.d_delta == 0 {
            return Some("difficulty.d_delta must be at least 1".into());
        }
        if !(self.gamma_fast > self.gamma_slow && self.gamma_slow > 0.0 && self.gamma_fast <= 1.0) {
            return Some(format!(
                "difficulty.gamma_fast ({}) must be above difficulty.gamma_slow ({}), both in (0, 1]",
                self.gamma_fast, self.gamma_slow
            ));
        }
        if self.select_interval == 0 {
            return Some("difficulty.select_interval must be at least 1".into());
        }
        None
    }
}

/// One environment's controller state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvDifficulty {
    /// Window's lowest difficulty.
    pub low: u64,
    /// Window's highest difficulty.
    pub high: u64,
    /// Wins at `high` since the last check.
    pub wins_at_high: u32,
    /// Plays at `high` since the last check.
    pub plays_at_high: u32,
    /// Fast average of rewards (`None` before the first).
    pub mu_fast: Option<f64>,
    /// Slow average of rewards.
    pub mu_slow: Option<f64>,
}

/// Every environment's state, by environment name (sorted, so its JSON is stable).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DifficultyState {
    /// Per environment.
    pub envs: BTreeMap<String, EnvDifficulty>,
}

impl DifficultyState {
    /// The state of `env` (a fresh one at difficulty 0 if it was never played).
    pub fn env(&self, env: &str) -> EnvDifficulty {
        self.envs.get(env).cloned().unwrap_or_default()
    }

    /// The difficulty of `env`'s next problem, drawn with `seed`.
    pub fn sample(&self, cfg: &DifficultyConfig, env: &str, seed: u64) -> u64 {
        match cfg.controller {
            ControllerKind::SlidingWindow => {
                let s = self.env(env);
                s.low + seed % (s.high - s.low + 1)
            }
            ControllerKind::LearningPotential => cfg.lp_difficulty,
        }
    }

    /// Records one play of `env` at `difficulty`: `won` or not.
    pub fn record(&mut self, cfg: &DifficultyConfig, env: &str, difficulty: u64, won: bool) {
        let s = self.envs.entry(env.to_owned()).or_default();
        let reward = if won { 1.0 } else { 0.0 };
        match (s.mu_fast, s.mu_slow) {
            (Some(fast), Some(slow)) => {
                s.mu_fast = Some((1.0 - cfg.gamma_fast) * fast + cfg.gamma_fast * reward);
                s.mu_slow = Some((1.0 - cfg.gamma_slow) * slow + cfg.gamma_slow * reward);
            }
            _ => {
                s.mu_fast = Some(reward);
                s.mu_slow = Some(reward);
            }
        }
        if cfg.controller != ControllerKind::SlidingWindow || difficulty != s.high {
            return;
        }
        s.plays_at_high += 1;
        s.wins_at_high += u32::from(won);
        if s.plays_at_high >= cfg.tau_num {
            let rate = f64::from(s.wins_at_high) / f64::from(s.plays_at_high);
            if rate >= cfg.tau_acc && s.high < cfg.max_difficulty {
                s.high += 1;
                s.low = s.low.max((s.high + 1).saturating_sub(cfg.d_delta));
            }
            s.wins_at_high = 0;
            s.plays_at_high = 0;
        }
    }

    /// `|mu_fast - mu_slow| / (2 (gamma_fast - gamma_slow))`, 0 before any play.
    pub fn potential(&self, cfg: &DifficultyConfig, env: &str) -> f64 {
        match self.envs.get(env).map(|s| (s.mu_fast, s.mu_slow)) {
            Some((Some(fast), Some(slow))) => {
                (fast - slow).abs() / (2.0 * (cfg.gamma_fast - cfg.gamma_slow))
            }
            _ => 0.0,
        }
    }

    /// Which of `envs` to play (indices, sorted), `n` of them (all when `n` is 0 or at least
    /// their number). Sliding window: drawn uniformly with `seed`. Learning potential: the
    /// `max(1, n / 2)` of highest potential (ties in list order), the rest drawn at random.
    pub fn select(
        &self,
        cfg: &DifficultyConfig,
        envs: &[String],
        n: usize,
        seed: u64,
    ) -> Vec<usize> {
        if n == 0 || n >= envs.len() {
            return (0..envs.len()).collect();
        }
        let mut chosen = Vec::with_capacity(n);
        let mut rest: Vec<usize> = (0..envs.len()).collect();
        if cfg.controller == ControllerKind::LearningPotential {
            let mut by_lp = rest.clone();
            by_lp.sort_by(|&a, &b| {
                self.potential(cfg, &envs[b])
                    .total_cmp(&self.potential(cfg, &envs[a]))
                    .then(a.cmp(&b))
            });
            chosen.extend(by_lp.into_iter().take((n / 2).max(1)));
            rest.retain(|i| !chosen.contains(i));
        }
        let mut s = seed;
        while chosen.len() < n {
            s = seeds::mix(s, 1);
            chosen.push(rest.remove((s % rest.len() as u64) as usize));
        }
        chosen.sort_unstable();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(tau_num: u32) -> DifficultyConfig {
        DifficultyConfig {
            tau_num,
            max_difficulty: 5,
            ..DifficultyConfig::default()
        }
    }

    #[test]
    fn the_window_rises_after_tau_num_plays_at_high_won_often_enough() {
        let cfg = window(4);
        let mut st = DifficultyState::default();
        // 3 wins of 4 at high = 0.75 < 0.9: no promotion, and the count starts again.
        for won in [true, true, true, false] {
            st.record(&cfg, "a", 0, won);
        }
        assert_eq!((st.env("a").low, st.env("a").high), (0, 0));
        assert_eq!(st.env("a").plays_at_high, 0);
        // 4 of 4: promoted to [0, 1].
        for _ in 0..4 {
            st.record(&cfg, "a", 0, true);
        }
        assert_eq!((st.env("a").low, st.env("a").high), (0, 1));
        // Plays below high do not count toward a promotion.
        for _ in 0..10 {
            st.record(&cfg, "a", 0, true);
        }
        assert_eq!(st.env("a").high, 1);
        assert_eq!(st.env("a").plays_at_high, 0);
        // Up to high 4: the window is then [1, 4] (d_delta 4), and it stops at max 5.
        for h in 1..10 {
            for _ in 0..4 {
                st.record(&cfg, "a", h, true);
            }
        }
        assert_eq!((st.env("a").low, st.env("a").high), (2, 5));
        assert_eq!(st.env("b"), EnvDifficulty::default());
    }

    #[test]
    fn sampling_stays_in_the_window_and_covers_it() {
        let cfg = window(1);
        let mut st = DifficultyState::default();
        for h in 0..3 {
            st.record(&cfg, "a", h, true);
        }
        assert_eq!((st.env("a").low, st.env("a").high), (0, 3));
        let seen: std::collections::BTreeSet<u64> = (0..64)
            .map(|s| st.sample(&cfg, "a", seeds::mix(s, 3)))
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3]);
        let lp = DifficultyConfig {
            controller: ControllerKind::LearningPotential,
            ..cfg
        };
        assert_eq!(st.sample(&lp, "a", 99), 1);
    }

    #[test]
    fn learning_potential_follows_the_reference_averages() {
        let cfg = DifficultyConfig {
            controller: ControllerKind::LearningPotential,
            ..DifficultyConfig::default()
        };
        let mut st = DifficultyState::default();
        st.record(&cfg, "a", 1, true);
        // The first reward sets both averages: no potential yet.
        assert_eq!(st.potential(&cfg, "a"), 0.0);
        st.record(&cfg, "a", 1, false);
        // fast 0.65 * 1 + 0.35 * 0 = 0.65, slow 0.85: |0.65 - 0.85| / (2 * 0.2) = 0.5.
        assert!((st.env("a").mu_fast.unwrap() - 0.65).abs() < 1e-12);
        assert!((st.env("a").mu_slow.unwrap() - 0.85).abs() < 1e-12);
        assert!((st.potential(&cfg, "a") - 0.5).abs() < 1e-12);
        // The window never moves under this controller.
        assert_eq!(st.env("a").high, 0);
    }

    #[test]
    fn selection_takes_the_frontier_then_draws_the_rest() {
        let lp = DifficultyConfig {
            controller: ControllerKind::LearningPotential,
            ..DifficultyConfig::default()
        };
        let envs: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let mut st = DifficultyState::default();
        // c: potential 0.5; d: smaller; a, b: none.
        st.record(&lp, "c", 1, true);
        st.record(&lp, "c", 1, false);
        st.record(&lp, "d", 1, true);
        st.record(&lp, "d", 1, false);
        st.record(&lp, "d", 1, true);
        assert!(st.potential(&lp, "d") < st.potential(&lp, "c"));
        for seed in 0..20 {
            let two = st.select(&lp, &envs, 2, seed);
            assert!(two.contains(&2), "{two:?}");
            assert_eq!(two.len(), 2);
            let four = st.select(&lp, &envs, 4, seed);
            assert_eq!(four, [0, 1, 2, 3]);
        }
        // The window draws uniformly: every env gets picked over seeds.
        let sw = DifficultyConfig::default();
        let mut seen = [0usize; 4];
        for seed in 0..200 {
            for i in st.select(&sw, &envs, 1, seed) {
                seen[i] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c > 20), "{seen:?}");
        assert_eq!(st.select(&sw, &envs, 0, 5), [0, 1, 2, 3]);
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |f: fn(&mut DifficultyConfig)| {
            let mut c = DifficultyConfig::default();
            f(&mut c);
            c.problem().unwrap()
        };
        assert!(bad(|c| c.tau_acc = 1.5).contains("tau_acc"));
        assert!(bad(|c| c.tau_num = 0).contains("tau_num"));
        assert!(bad(|c| c.d_delta = 0).contains("d_delta"));
        assert!(bad(|c| c.gamma_slow = 0.5).contains("gamma_fast (0.35) must be above"));
        assert!(bad(|c| c.select_interval = 0).contains("select_interval"));
        assert_eq!(DifficultyConfig::default().problem(), None);
    }
}
