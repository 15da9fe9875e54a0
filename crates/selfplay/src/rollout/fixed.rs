//! Fixed-environment training (the reference's fixed-env mode): the agent alone trains on a
//! fixed list of environments, at difficulties a controller ([`crate::difficulty`]) adapts to
//! its wins. A rollout chooses its environments (again every `select_interval` rollouts),
//! draws one problem per environment (a seed and a difficulty; every play of the game shares
//! it, a GRPO group on one problem as RLVE samples a prompt several times), plays them, and
//! records each play's outcome in the controller. Credit and update are self-play's.
//!
//! Problem seeds are drawn from `[2^30, 2^31)`; `spade eval` draws its seeds below 10^6, so
//! evaluation never plays a problem seed that training used.
use super::play::{Played, Problem, Start};
use super::{EnvMetrics, FixedEnvMetrics, Metrics, Run};
use crate::error::Result;
use crate::rewards;

/// The lowest problem seed of training.
pub const TRAIN_SEED_BASE: u64 = 1 << 30;

impl Run<'_> {
    /// The pool indices played in rollout `r`: the controller's selection, made again every
    /// `select_interval` rollouts.
    pub(super) fn choose_fixed_games(&mut self, r: u64) -> Vec<usize> {
        let cfg = &self.cfg.difficulty;
        if self.state.fixed_selection.is_empty() || r.is_multiple_of(cfg.select_interval) {
            let names: Vec<String> = self.state.pool.iter().map(|e| e.skill.clone()).collect();
            let seed = self.seed("fixed-select", &[r]);
            self.state.fixed_selection =
                self.state
                    .difficulty
                    .select(cfg, &names, self.cfg.fixed_envs_per_rollout, seed);
        }
        self.state.fixed_selection.clone()
    }

    /// One problem per game: a seed in `[2^30, 2^31)` and the controller's difficulty.
    pub(super) fn draw_problems(&self, r: u64, games: &[usize]) -> Vec<(usize, Problem)> {
        games
            .iter()
            .map(|&pi| {
                let name = &self.state.pool[pi].skill;
                let d_seed = self.seed("fixed-difficulty", &[r, pi as u64]);
                let difficulty = self
                    .state
                    .difficulty
                    .sample(&self.cfg.difficulty, name, d_seed);
                let seed =
                    TRAIN_SEED_BASE + self.seed("fixed-problem", &[r, pi as u64]) % TRAIN_SEED_BASE;
                (pi, Problem { seed, difficulty })
            })
            .collect()
    }

    /// Plays every problem `plays_per_game` times.
    pub(super) async fn play_fixed(
        &mut self,
        r: u64,
        problems: &[(usize, Problem)],
        m: &mut Metrics,
    ) -> Result<Vec<Played>> {
        let starts = problems
            .iter()
            .flat_map(|&(pool, problem)| {
                (0..self.cfg.plays_per_game).map(move |i| Start {
                    pool,
                    hint: false,
                    i,
                    problem: Some(problem),
                })
            })
            .collect();
        self.play_starts(r, problems.len(), starts, m).await
    }

    /// Records every play in the controller, in play order, and writes the rollout's
    /// per-environment metrics.
    pub(super) fn score_fixed(
        &mut self,
        games: &[usize],
        problems: &[(usize, Problem)],
        played: &[Played],
        m: &mut Metrics,
    ) {
        let mut ordered: Vec<&Played> = played.iter().collect();
        // Plays that failed at reset were collected first; record in (game, play) order.
        ordered.sort_by_key(|p| games.iter().position(|&g| g == p.pool));
        for p in &ordered {
            let name = &self.state.pool[p.pool].skill;
            let d = p.difficulty.expect("a fixed-env play has a difficulty");
            self.state
                .difficulty
                .record(&self.cfg.difficulty, name, d, rewards::is_win(p.ret));
        }
        let win = |ps: &[&Played]| {
            let wins: Vec<f64> = ps
                .iter()
                .map(|p| f64::from(u8::from(rewards::is_win(p.ret))))
                .collect();
            rewards::mean(&wins)
        };
        for &(pi, problem) in problems {
            let env = &self.state.pool[pi];
            let ps: Vec<&Played> = ordered.iter().copied().filter(|p| p.pool == pi).collect();
            let st = self.state.difficulty.env(&env.skill);
            m.fixed.push(FixedEnvMetrics {
                env: env.skill.clone(),
                difficulty: problem.difficulty,
                plays: ps.len(),
                win_rate: win(&ps),
                low: st.low,
                high: st.high,
                potential: self
                    .state
                    .difficulty
                    .potential(&self.cfg.difficulty, &env.skill),
            });
            m.envs.push(EnvMetrics {
                id: env.id.clone(),
                skill: env.skill.clone(),
                win_rate: win(&ps),
                timeout: ps.iter().any(|p| p.timed_out()),
                ..EnvMetrics::default()
            });
            m.timeouts += usize::from(ps.iter().any(|p| p.timed_out()));
        }
        m.win_rate = win(&ordered);
        let returns: Vec<f64> = ordered.iter().map(|p| p.ret).collect();
        m.mean_return = rewards::mean(&returns);
    }
}
