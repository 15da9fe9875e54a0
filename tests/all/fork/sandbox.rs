//! `Runtime::fork` on a bare sandbox: a copy in exactly its parent's state.

use spade_sandbox::{ErrorKind, ForkError, Limits, Sandbox, SandboxOptions, Step};

use super::STATEFUL;
use crate::common::runtime;

async fn started(steps: &[&str]) -> Sandbox {
    let runtime = runtime();
    let mut sandbox = runtime
        .sandbox(STATEFUL, SandboxOptions::seeded(11))
        .await
        .unwrap();
    sandbox.reset(Some(3)).await.unwrap();
    for action in steps {
        sandbox.step(action).await.unwrap();
    }
    sandbox
}

/// Plays `actions` and returns each step with its fuel.
async fn play(sandbox: &mut Sandbox, actions: &[&str]) -> Vec<(Step, u64)> {
    let mut steps = Vec::new();
    for action in actions {
        let step = sandbox.step(action).await.unwrap();
        steps.push((step, sandbox.last_fuel()));
    }
    steps
}

#[tokio::test]
async fn a_fork_and_its_parent_given_the_same_actions_agree_byte_for_byte() {
    let runtime = runtime();
    let mut parent = started(&["add:a", "add:b", "x"]).await;
    let mut copy = runtime.fork(&mut parent, None).await.unwrap();
    assert_eq!(copy.info(), parent.info());
    let actions = ["add:c", "y", "add:a", "z"];
    let theirs = play(&mut parent, &actions).await;
    let ours = play(&mut copy, &actions).await;
    assert_eq!(ours, theirs, "observations, rewards, infos and fuel");
    // Every kind of state went on from where the parent was: the counter from 3, the list,
    // the module dict, both generators, WASI entropy and the clock.
    let last = &ours.last().unwrap().0;
    assert!(
        last.observation
            .starts_with("count=7 items=['a', 'b', 'c', 'a'] seen=[('a', 2), ('b', 1), ('c', 1)]"),
        "{}",
        last.observation
    );
    assert_eq!(last.reward, 7.0);
    assert_eq!(copy.solution().await.unwrap(), "7");
}

#[tokio::test]
async fn forks_given_other_actions_diverge_and_neither_sees_the_other() {
    let runtime = runtime();
    let mut parent = started(&["add:a"]).await;
    let mut copy = runtime.fork(&mut parent, None).await.unwrap();
    let parent_step = parent.step("add:p").await.unwrap();
    let copy_step = copy.step("add:c").await.unwrap();
    assert!(
        parent_step
            .observation
            .contains("items=['a', 'p'] seen=[('a', 1), ('p', 1)]"),
        "{}",
        parent_step.observation
    );
    assert!(
        copy_step
            .observation
            .contains("items=['a', 'c'] seen=[('a', 1), ('c', 1)]"),
        "{}",
        copy_step.observation
    );
    // Both drew the same numbers: the generators were copied, not shared.
    let draws = |obs: &str| obs.split(" own=").nth(1).unwrap().to_owned();
    assert_eq!(
        draws(&parent_step.observation),
        draws(&copy_step.observation)
    );
}

#[tokio::test]
async fn forks_of_forks_and_many_forks_of_one_state_are_exact() {
    let runtime = runtime();
    let mut parent = started(&["add:a"]).await;
    let mut copies = runtime
        .fork_n(&mut parent, &[None, None, None])
        .await
        .unwrap();
    assert_eq!(copies.len(), 3);
    let mut grandchild = runtime.fork(&mut copies[1], None).await.unwrap();
    let expected = play(&mut parent, &["add:b", "add:c"]).await;
    for copy in copies.iter_mut().chain([&mut grandchild]) {
        assert_eq!(play(copy, &["add:b", "add:c"]).await, expected);
    }
}

#[tokio::test]
async fn a_reseeded_fork_draws_other_numbers_and_the_same_reseed_draws_the_same() {
    let runtime = runtime();
    let mut parent = started(&[]).await;
    let mut copies = runtime
        .fork_n(&mut parent, &[Some(1), Some(2), Some(1)])
        .await
        .unwrap();
    let mut steps = Vec::new();
    for copy in &mut copies {
        steps.push(copy.step("x").await.unwrap().observation);
    }
    let exact = parent.step("x").await.unwrap().observation;
    let global = |obs: &str| obs.split(" global=").nth(1).unwrap().to_owned();
    assert_ne!(
        global(&steps[0]),
        global(&steps[1]),
        "other seeds, other draws"
    );
    assert_ne!(
        global(&steps[0]),
        global(&exact),
        "a reseed is not the parent's stream"
    );
    assert_eq!(steps[0], steps[2], "the same reseed gives the same copy");
    // The environment's own generator is its state, not the sandbox's: it is copied as is.
    let own = |obs: &str| {
        obs.split(" own=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(own(&steps[1]), own(&exact));
}

#[tokio::test]
async fn a_dead_sandbox_cannot_be_forked() {
    let runtime = runtime().with_limits(Limits {
        fuel_per_call: 50_000_000,
        ..runtime().limits().clone()
    });
    let mut sandbox = runtime
        .sandbox(STATEFUL, SandboxOptions::seeded(1))
        .await
        .unwrap();
    sandbox.reset(Some(1)).await.unwrap();
    assert_eq!(
        sandbox.step("burn").await.unwrap_err().kind(),
        ErrorKind::OutOfFuel
    );
    let Err(refused) = runtime.fork(&mut sandbox, None).await else {
        panic!("a dead sandbox was forked");
    };
    assert_eq!(refused, ForkError::Dead(ErrorKind::OutOfFuel));
    assert!(
        refused
            .to_string()
            .starts_with("cannot fork: this sandbox is dead after"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_fork_keeps_the_parents_account_of_its_last_call() {
    let runtime = runtime();
    let mut parent = started(&["add:a"]).await;
    let fuel = parent.last_fuel();
    let copy = runtime.fork(&mut parent, None).await.unwrap();
    assert_eq!(parent.last_fuel(), fuel);
    assert_eq!(
        copy.last_fuel(),
        0,
        "the copy ran nothing of the environment's"
    );
}

#[tokio::test]
async fn a_state_holding_an_output_stream_is_refused_and_one_before_it_prints_is_not() {
    let runtime = runtime();
    let mut parent = started(&["add:a"]).await;
    // Before the environment prints, the copy prints into its own capture.
    let mut copy = runtime.fork(&mut parent, None).await.unwrap();
    copy.step("print").await.unwrap();
    assert_eq!(copy.last_output().stdout, "printed\n");
    assert_eq!(parent.last_output().stdout, "");
    // Printing leaves the guest holding stdout's WASI stream, which a copy cannot have.
    let Err(refused) = runtime.fork(&mut copy, None).await else {
        panic!("a state holding a stream was forked");
    };
    assert_eq!(
        refused,
        ForkError::HostResource("an open output stream (stdout or stderr)".into())
    );
    assert!(
        refused
            .to_string()
            .contains("a host resource a fork cannot duplicate"),
        "{refused}"
    );
    // The refusal leaves the sandbox as it was.
    assert!(
        copy.step("add:b")
            .await
            .unwrap()
            .observation
            .starts_with("count=3")
    );
}
