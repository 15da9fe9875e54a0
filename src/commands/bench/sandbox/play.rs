//! The step loop every steps/s figure comes from: a fixture's actions in turn, a new episode
//! (reset with the next seed) whenever one ends.

use std::time::{Duration, Instant};

use spade_envtools::Episode;
use spade_sandbox::Sandbox;

use super::Fixture;

/// Plays `steps` steps of `fixture` in `sandbox` (already reset with seed 0): each step's
/// time, and the whole loop's (resets included).
pub async fn play(
    sandbox: &mut Sandbox,
    fixture: &Fixture,
    steps: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let mut times = Vec::with_capacity(steps);
    let (mut episode, mut index) = (0u64, 0usize);
    let start = Instant::now();
    for _ in 0..steps {
        let t = Instant::now();
        let step = sandbox
            .step(&fixture.actions[index % fixture.actions.len()])
            .await?;
        times.push(t.elapsed());
        index += 1;
        if step.terminated || step.truncated {
            episode += 1;
            index = 0;
            sandbox.reset(Some(episode)).await?;
        }
    }
    Ok((times, start.elapsed()))
}

/// [`play`] through an unrecorded [`Episode`] (already reset with seed 0), the way every
/// caller plays: the whole loop's time, to set against the bare sandbox's in the same run.
pub async fn play_episode(
    episode: &mut Episode,
    fixture: &Fixture,
    steps: usize,
) -> anyhow::Result<Duration> {
    let (mut seed, mut index) = (0u64, 0usize);
    let start = Instant::now();
    for _ in 0..steps {
        let action = &fixture.actions[index % fixture.actions.len()];
        let step = episode.step(action).await.result?;
        index += 1;
        if step.terminated || step.truncated {
            seed += 1;
            index = 0;
            episode.reset(Some(seed)).await.result?;
        }
    }
    Ok(start.elapsed())
}
