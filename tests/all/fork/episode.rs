//! `Episode::fork`: recorded forks name their parent's file, and `spade replay` of a fork
//! replays the parent's prefix, then the fork's calls, byte for byte.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use spade_envtools::trajectory::RecordMeta;
use spade_envtools::trajectory::{
    ReplayOptions, ReplayReport, Trajectory, TrajectoryError, replay,
};
use spade_envtools::{Branch, Episode, EpisodeError, Record};
use spade_sandbox::SandboxOptions;

use super::STATEFUL;
use crate::common::{runtime, spade, stderr};

fn to_file(path: &Path) -> Record {
    Record::to(
        BufWriter::new(File::create(path).unwrap()),
        RecordMeta::default(),
    )
}

async fn parent_at(path: &Path, actions: &[&str]) -> Episode {
    let mut episode = Episode::start(
        &runtime(),
        STATEFUL,
        SandboxOptions::seeded(5),
        to_file(path),
    )
    .await
    .unwrap();
    episode.reset(Some(9)).await.into_result().unwrap();
    for action in actions {
        episode.step(action).await.into_result().unwrap();
    }
    episode
}

fn branch(dir: &Path, name: &str, parent: &str, reseed: Option<u64>) -> Branch {
    Branch {
        reseed,
        record: to_file(&dir.join(name)),
        parent: parent.to_owned(),
    }
}

async fn play_and_finish(mut episode: Episode, actions: &[&str]) -> Vec<String> {
    let mut seen = Vec::new();
    for action in actions {
        seen.push(
            episode
                .step(action)
                .await
                .into_result()
                .unwrap()
                .observation,
        );
    }
    episode.finish().unwrap();
    seen
}

async fn replayed(path: &Path) -> Result<ReplayReport, TrajectoryError> {
    let trajectory = Trajectory::open(path, u64::MAX).unwrap();
    let options = ReplayOptions {
        dir: path.parent().map(Path::to_path_buf),
        ..ReplayOptions::default()
    };
    replay(&runtime(), &trajectory, &options).await
}

async fn replays_identically(path: &Path) {
    let report = replayed(path).await.unwrap();
    assert_eq!(report.divergence, None, "{}", path.display());
    assert!(report.truncated.is_none());
    Trajectory::open(path, u64::MAX).unwrap().verify().unwrap();
}

fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

#[tokio::test]
async fn a_recorded_fork_and_a_fork_of_it_replay_byte_for_byte() {
    let (_keep, dir) = tempdir();
    let mut parent = parent_at(&dir.join("parent.jsonl"), &["add:a", "add:b"]).await;
    let mut fork = parent
        .fork(branch(&dir, "fork.jsonl", "parent.jsonl", None))
        .await
        .into_result()
        .unwrap();
    assert_eq!(fork.info().unwrap(), parent.info().unwrap());
    let theirs = play_and_finish(parent, &["add:p", "x"]).await;
    fork.step("add:f").await.into_result().unwrap();
    let mut grandchild = fork
        .fork(branch(&dir, "grandchild.jsonl", "fork.jsonl", Some(4)))
        .await
        .into_result()
        .unwrap();
    let ours = play_and_finish(fork, &["x"]).await;
    assert!(
        theirs[0].starts_with("count=3 items=['a', 'b', 'p']"),
        "{}",
        theirs[0]
    );
    assert!(
        ours[0].starts_with("count=4 items=['a', 'b', 'f']"),
        "{}",
        ours[0]
    );
    play_and_finish(
        grandchild
            .fork(Branch::exact())
            .await
            .into_result()
            .unwrap(),
        &["y"],
    )
    .await;
    play_and_finish(grandchild, &["add:g", "y"]).await;
    // The fork's file goes on from the parent's call index, and says where it came from.
    let fork_file = Trajectory::open(&dir.join("fork.jsonl"), u64::MAX).unwrap();
    let origin = fork_file.header.fork.clone().unwrap();
    assert_eq!(
        (origin.parent.as_str(), origin.at, origin.reseed),
        ("parent.jsonl", 4, None)
    );
    assert_eq!(
        fork_file.calls[0].1.index, 4,
        "load, reset and two steps came before"
    );
    for name in ["parent.jsonl", "fork.jsonl", "grandchild.jsonl"] {
        replays_identically(&dir.join(name)).await;
    }
    // And from the command line.
    let out = spade(&["replay", dir.join("grandchild.jsonl").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn a_fork_whose_parent_file_was_edited_or_is_missing_is_refused() {
    let (_keep, dir) = tempdir();
    let mut parent = parent_at(&dir.join("parent.jsonl"), &["add:a"]).await;
    let fork = parent
        .fork(branch(&dir, "fork.jsonl", "parent.jsonl", None))
        .await
        .into_result()
        .unwrap();
    play_and_finish(fork, &["x"]).await;
    play_and_finish(parent, &["y"]).await;
    // Calls after the fork are not the fork's business: the parent may go on.
    replays_identically(&dir.join("fork.jsonl")).await;
    // An edit in the prefix (the action of the first step) is refused before anything runs.
    let text = std::fs::read_to_string(dir.join("parent.jsonl")).unwrap();
    std::fs::write(dir.join("parent.jsonl"), text.replacen("add:a", "add:z", 1)).unwrap();
    let refused = replayed(&dir.join("fork.jsonl")).await.unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(refused, TrajectoryError::ForkParent { .. }),
        "{message}"
    );
    assert!(
        message.contains(
            "parent.jsonl: its lines before the fork are not the ones the fork was made from"
        ),
        "{message}"
    );
    assert!(
        message.contains("the parent was changed after the fork"),
        "{message}"
    );
    let out = spade(&["replay", dir.join("fork.jsonl").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("the parent was changed after the fork"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(dir.join("parent.jsonl")).unwrap();
    let message = replayed(&dir.join("fork.jsonl"))
        .await
        .unwrap_err()
        .to_string();
    assert!(message.starts_with("the fork's parent "), "{message}");
    assert!(
        message.contains("parent.jsonl: cannot read the trajectory"),
        "{message}"
    );
    // Without the file's directory, a fork cannot be replayed at all.
    let trajectory = Trajectory::open(&dir.join("fork.jsonl"), u64::MAX).unwrap();
    let message = replay(&runtime(), &trajectory, &ReplayOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("replay it from its file"), "{message}");
}

#[tokio::test]
async fn a_reseeded_fork_replays_identically_and_differs_from_an_exact_one() {
    let (_keep, dir) = tempdir();
    let mut parent = parent_at(&dir.join("parent.jsonl"), &["add:a"]).await;
    let mut forks = parent
        .fork_n(vec![
            branch(&dir, "exact.jsonl", "parent.jsonl", None),
            branch(&dir, "reseeded.jsonl", "parent.jsonl", Some(77)),
        ])
        .await
        .into_result()
        .unwrap();
    let reseeded = play_and_finish(forks.pop().unwrap(), &["x"]).await;
    let exact = play_and_finish(forks.pop().unwrap(), &["x"]).await;
    let theirs = play_and_finish(parent, &["x"]).await;
    assert_eq!(exact, theirs);
    let global = |obs: &str| obs.split(" global=").nth(1).unwrap().to_owned();
    assert_ne!(global(&reseeded[0]), global(&theirs[0]));
    for name in ["exact.jsonl", "reseeded.jsonl"] {
        replays_identically(&dir.join(name)).await;
    }
}

#[tokio::test]
async fn a_recorded_fork_needs_a_recorded_parent_and_a_loaded_one() {
    let (_keep, dir) = tempdir();
    let mut unrecorded =
        Episode::start(&runtime(), STATEFUL, SandboxOptions::seeded(1), Record::Off)
            .await
            .unwrap();
    let refused = unrecorded
        .fork(branch(&dir, "fork.jsonl", "nowhere.jsonl", None))
        .await
        .result
        .unwrap_err();
    assert!(matches!(refused, EpisodeError::UnrecordedParent));
    assert!(
        refused
            .to_string()
            .starts_with("cannot record a fork of an episode that is not recorded"),
        "{refused}"
    );
    // An unrecorded fork of it is fine.
    let mut copy = unrecorded
        .fork(Branch::exact())
        .await
        .into_result()
        .unwrap();
    assert!(copy.reset(Some(1)).await.into_result().is_ok());
    let mut broken = Episode::start(&runtime(), "x = (", SandboxOptions::seeded(1), Record::Off)
        .await
        .unwrap();
    let refused = broken.fork(Branch::exact()).await.result.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("the environment failed to load (load); nothing to fork"),
        "{refused}"
    );
}
