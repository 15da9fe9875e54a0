//! `Episode`, the one door every caller plays through: each call returns its value with what
//! it cost, recorded or not; the load's failure and the difficulty rule live in it once.

use spade_envtools::trajectory::{RecordMeta, Trajectory};
use spade_envtools::{Episode, EpisodeError, Record};
use spade_sandbox::{CallError, ErrorKind, SandboxOptions};

use crate::common::{env_source, runtime};

/// A reset that takes a difficulty and prints it, and one that takes none.
const LEVELS: &str = r#"
class LevelEnv:
    def __init__(self, max_turns=4):
        self.max_turns = max_turns

    def reset(self, seed=None, difficulty=0):
        print("level", difficulty)
        self.answer = difficulty + 1
        return f"level {difficulty}", {"difficulty": difficulty}

    def step(self, action):
        won = action == f"\\boxed{{{self.answer}}}"
        return "done", float(won), True, False, {}

    def solution(self):
        return f"\\boxed{{{self.answer}}}"
"#;

async fn start(source: &str, record: Record) -> Episode {
    Episode::start(&runtime(), source, SandboxOptions::seeded(7), record)
        .await
        .expect("nothing to write, or memory")
}

fn memory() -> Record {
    Record::Memory(RecordMeta::default())
}

#[tokio::test]
async fn a_call_returns_its_value_with_the_fuel_and_output_it_cost() {
    let mut episode = start(&env_source("print_flood"), Record::Off).await;
    assert!(episode.load_cost().fuel > 0, "loading runs Python");
    let reset = episode.reset(Some(1)).await;
    assert_eq!(reset.result.unwrap().observation, "flood ahead");
    assert_eq!(reset.cost.output.stdout, "reset called\n");
    assert!(reset.cost.fuel > 0);
    // Each step prints 5,000 lines of 1,000 bytes: the head is kept, the rest counted.
    let step = episode.step("go").await;
    assert_eq!(step.result.unwrap().observation, "flooded");
    assert!(step.cost.output.dropped_bytes > 0);
    assert!(step.cost.output.dropped_bytes <= 5_000 * 1_001);
    assert!(
        step.cost.fuel > reset.cost.fuel,
        "printing 5 MB costs more than one line"
    );
    // The totals are the sum of the calls, the load included.
    let spent = episode.spent();
    assert_eq!(spent.calls, 3);
    let fuels = [episode.load_cost().fuel, reset.cost.fuel, step.cost.fuel];
    assert_eq!(spent.total_fuel, fuels.iter().sum::<u64>());
    assert_eq!(spent.max_fuel, *fuels.iter().max().unwrap());
    assert_eq!(spent.dropped_bytes, step.cost.output.dropped_bytes);
}

#[tokio::test]
async fn recording_changes_neither_values_nor_costs() {
    let source = env_source("echo_word");
    let mut plain = start(&source, Record::Off).await;
    let mut recorded = start(&source, memory()).await;
    assert_eq!(plain.load_cost().fuel, recorded.load_cost().fuel);
    let (a, b) = (plain.reset(Some(3)).await, recorded.reset(Some(3)).await);
    assert_eq!(a.result.unwrap(), b.result.unwrap());
    assert_eq!((a.cost.fuel, a.cost.output), (b.cost.fuel, b.cost.output));
    for action in ["\\boxed{nope}", "\\boxed{amber}"] {
        let (a, b) = (plain.step(action).await, recorded.step(action).await);
        assert_eq!(a.result.unwrap(), b.result.unwrap());
        assert_eq!(a.cost.fuel, b.cost.fuel);
    }
    assert_eq!(plain.spent(), recorded.spent());
    assert!(plain.finish().unwrap().trajectory.is_none());
    let finished = recorded.finish().unwrap();
    let text = finished.trajectory.unwrap();
    let trajectory = Trajectory::parse(&text).unwrap();
    trajectory.verify().unwrap();
    // load, reset, two steps.
    assert_eq!(trajectory.calls.len(), 4);
    assert_eq!(finished.summary.unwrap().lines, 5);
}

#[tokio::test]
async fn a_reset_at_a_difficulty_passes_it_and_refuses_an_env_that_drops_it() {
    let mut episode = start(LEVELS, Record::Off).await;
    let reset = episode.reset_at(Some(1), Some(4)).await;
    assert_eq!(reset.cost.output.stdout, "level 4\n");
    assert_eq!(reset.result.unwrap().observation, "level 4");
    let step = episode.step("\\boxed{5}").await.result.unwrap();
    assert_eq!(step.reward, 1.0);
    // No difficulty: a plain reset, the environment's default.
    let plain = episode.reset_at(Some(1), None).await.result.unwrap();
    assert_eq!(plain.observation, "level 0");

    // echo_word's reset takes no difficulty: the reset runs (and is recorded, with the field
    // and its name among the dropped ones), but its problem is not the one asked for.
    let mut episode = start(&env_source("echo_word"), memory()).await;
    let refused = episode.reset_at(Some(1), Some(4)).await;
    let err = refused.result.unwrap_err();
    assert!(matches!(err, EpisodeError::NoDifficulty), "{err:?}");
    assert_eq!(
        err.to_string(),
        "this environment's reset() takes no `difficulty` argument"
    );
    assert!(refused.cost.fuel > 0, "the reset ran");
    let text = episode.finish().unwrap().trajectory.unwrap();
    let reset_line: serde_json::Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    assert_eq!(reset_line["fields"], serde_json::json!({"difficulty": 4}));
    assert_eq!(
        reset_line["ok"]["dropped"],
        serde_json::json!(["difficulty"])
    );
}

#[tokio::test]
async fn an_env_that_never_loaded_refuses_every_call_without_running_it() {
    let mut episode = start(&env_source("fault_syntax_error"), memory()).await;
    let err = episode.info().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Load);
    let reset = episode.reset(Some(1)).await;
    match reset.result {
        Err(EpisodeError::Call(CallError::Usage(message))) => assert_eq!(
            message,
            "the environment failed to load (load); nothing to call"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(reset.cost.fuel, 0);
    assert_eq!(
        episode.spent().calls,
        0,
        "neither the load nor the refusal ran"
    );
    // Only the load is in the trajectory.
    let text = episode.finish().unwrap().trajectory.unwrap();
    assert_eq!(Trajectory::parse(&text).unwrap().calls.len(), 1);
}

#[tokio::test]
async fn after_a_host_limit_the_episode_is_dead_and_says_why() {
    let mut episode = start(&env_source("fault_infinite_loop"), Record::Off).await;
    episode.reset(Some(1)).await.result.unwrap();
    let step = episode.step("go").await;
    assert_eq!(step.result.unwrap_err().kind(), Some(ErrorKind::OutOfFuel));
    assert_eq!(step.cost.fuel, runtime().limits().fuel_per_call);
    assert_eq!(episode.dead(), Some(ErrorKind::OutOfFuel));
    let again = episode.step("go").await;
    assert!(
        matches!(
            again.result,
            Err(EpisodeError::Call(CallError::Dead(ErrorKind::OutOfFuel)))
        ),
        "{:?}",
        again.result
    );
    assert_eq!(again.cost.fuel, 0, "a refused call runs nothing");
}
