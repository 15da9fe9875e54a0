//! `spade serve`'s command-line errors.

use crate::common::fails_with;

#[test]
fn bad_command_lines_are_clear_errors() {
    fails_with(
        &["serve", "tests/envs/nope/env.py"],
        None,
        1,
        "environment file 'tests/envs/nope/env.py' does not exist",
    );
    fails_with(
        &[
            "serve",
            "tests/envs/grid_walk/env.py",
            "tests/envs/grid_walk/env.py",
        ],
        None,
        1,
        "two environment files have the id 'grid_walk'",
    );
    fails_with(
        &["serve", "--max-sessions", "0"],
        None,
        1,
        "--max-sessions must be at least 1",
    );
    fails_with(
        &["serve", "--session-idle-timeout=-1"],
        None,
        1,
        "--session-idle-timeout must be a number of seconds",
    );
    fails_with(
        &["serve", "--token-file", "tests/nope-token"],
        None,
        1,
        "token file 'tests/nope-token' does not exist",
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    fails_with(
        &["serve", "--token-file", empty.to_str().unwrap()],
        None,
        1,
        "is empty",
    );
    fails_with(
        &["serve", "--bind", "nowhere"],
        None,
        1,
        "invalid value 'nowhere' for '--bind",
    );
}
