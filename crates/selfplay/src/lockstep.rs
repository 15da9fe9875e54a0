//! The agent's lockstep play loop, shared by training and `spade eval`: each turn the policy
//! samples every live episode's next action as one batch ([`Policy::sample_each`]), then every
//! environment steps concurrently. Seeds come from the caller, so the loop is deterministic.
use std::time::Instant;

use spade_envtools::{Episode, EpisodeError};
use spade_model::chat::Message;
use spade_sandbox::{ErrorKind, Step};

use super::error::{Result, TrainError};
use super::extract;
use super::policy::{Policy, Role, Sampled};
use super::prompts::AgentExample;
use super::rewards;

/// Why a step produced no result.
#[derive(Debug)]
pub enum StepFailure {
    /// The environment's call failed (the episode ends; the kind tells fuel or deadline apart).
    Env(ErrorKind),
    /// The episode failed outside the environment (its trajectory could not be written): play
    /// stops with this error.
    Episode(EpisodeError),
}

/// Plays `action` in `env`.
async fn step_action(env: &mut Episode, action: &str) -> std::result::Result<Step, StepFailure> {
    env.step(action).await.result.map_err(|e| match e {
        EpisodeError::Call(c) => StepFailure::Env(c.kind()),
        other => StepFailure::Episode(other),
    })
}

/// One episode in play.
#[derive(Debug)]
pub struct LiveEpisode {
    /// Its environment (taken while a step runs).
    env: Option<Episode>,
    /// The chat so far: system prompt, worked examples, observations and the agent's replies.
    pub messages: Vec<Message>,
    /// Tool-use env: actions are `<tool_call>` blocks.
    pub tool_use: bool,
    /// The agent's turns, each with the exact prompt it was sampled from.
    pub turns: Vec<Sampled>,
    /// The last step's reward and whether it terminated the episode.
    pub last: Option<(f64, bool)>,
    /// The error kind that ended the episode, if a call failed.
    pub failure: Option<ErrorKind>,
    /// Whether the episode is over.
    pub done: bool,
}

impl LiveEpisode {
    /// An episode whose first observation is `observation` (hint included, if any), after the
    /// system prompt and the worked `examples` (each a user message and the agent's reply).
    pub fn new(
        env: Episode,
        system: &str,
        examples: &[AgentExample],
        observation: String,
        tool_use: bool,
    ) -> Self {
        let mut messages = Vec::with_capacity(2 + 2 * examples.len());
        messages.push(Message::new("system", system));
        for ex in examples {
            messages.push(Message::new("user", ex.user.clone()));
            messages.push(Message::new("assistant", ex.assistant.clone()));
        }
        messages.push(Message::new("user", observation));
        Self {
            env: Some(env),
            messages,
            tool_use,
            turns: Vec::new(),
            last: None,
            failure: None,
            done: false,
        }
    }

    /// The episode return: the last reward clipped to [-1, 1] if it terminated, else 0.
    pub fn ret(&self) -> f64 {
        match self.last {
            Some((reward, terminated)) => rewards::episode_return(Some(reward), terminated),
            None => 0.0,
        }
    }

    /// The environment (after play) and the agent's turns.
    pub fn into_parts(self) -> (Option<Episode>, Vec<Sampled>) {
        (self.env, self.turns)
    }
}

/// Seconds spent in the model and in the environments.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PlayTimes {
    /// Sampling actions.
    pub model: f64,
    /// Stepping environments.
    pub env: f64,
    /// Tokens sampled.
    pub tokens: usize,
}

fn join_error(e: tokio::task::JoinError) -> TrainError {
    TrainError::PlayTask(e)
}

/// Plays `episodes` for at most `max_turns` turns in lockstep. `turn_seed(i, turn)` seeds
/// episode `i`'s sample at `turn`; `on_turn` runs after every turn.
pub async fn play(
    policy: &mut dyn Policy,
    episodes: &mut [LiveEpisode],
    max_turns: u32,
    max_new_tokens: usize,
    turn_seed: impl Fn(usize, u32) -> u64,
    mut on_turn: impl FnMut(),
) -> Result<PlayTimes> {
    let mut times = PlayTimes::default();
    for turn in 0..max_turns {
        let active: Vec<usize> = (0..episodes.len()).filter(|&i| !episodes[i].done).collect();
        if active.is_empty() {
            break;
        }
        let tm = Instant::now();
        let seeds: Vec<u64> = active.iter().map(|&i| turn_seed(i, turn)).collect();
        let chats: Vec<&[Message]> = active.iter().map(|&i| &episodes[i].messages[..]).collect();
        let sampled = policy.sample_each(Role::Agent, &chats, max_new_tokens, &seeds)?;
        if sampled.len() != active.len() {
            return Err(TrainError::Policy(format!(
                "the policy returned {} completions for {} episodes",
                sampled.len(),
                active.len()
            )));
        }
        let mut actions = Vec::with_capacity(active.len());
        for (&i, s) in active.iter().zip(sampled) {
            times.tokens += s.tokens.len();
            let e = &mut episodes[i];
            actions.push(extract::action(&s.text, e.tool_use));
            e.messages.push(Message::new("assistant", s.text.clone()));
            e.turns.push(s);
        }
        times.model += tm.elapsed().as_secs_f64();
        let ts = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for (&i, action) in active.iter().zip(actions) {
            let mut env = episodes[i].env.take().expect("a live episode has its env");
            set.spawn(async move {
                let res = step_action(&mut env, &action).await;
                (i, env, res)
            });
        }
        let mut results = Vec::with_capacity(active.len());
        while let Some(j) = set.join_next().await {
            results.push(j.map_err(join_error)?);
        }
        results.sort_by_key(|(i, _, _)| *i);
        for (i, env, res) in results {
            let e = &mut episodes[i];
            e.env = Some(env);
            match res {
                Ok(step) => {
                    e.last = Some((step.reward, step.terminated));
                    if step.terminated || step.truncated {
                        e.done = true;
                    } else {
                        e.messages.push(Message::new("user", step.observation));
                    }
                }
                Err(StepFailure::Env(kind)) => {
                    e.done = true;
                    e.last = None;
                    e.failure = Some(kind);
                }
                Err(StepFailure::Episode(EpisodeError::Record(source))) => {
                    return Err(TrainError::Trajectory { path: None, source });
                }
                Err(StepFailure::Episode(other)) => {
                    return Err(TrainError::Environment(format!(
                        "playing an episode: {other}"
                    )));
                }
            }
        }
        times.env += ts.elapsed().as_secs_f64();
        on_turn();
    }
    policy.forget();
    Ok(times)
}
