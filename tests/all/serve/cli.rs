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
        &["serve", "--body-read-timeout=-1"],
        None,
        1,
        "--body-read-timeout must be a number of seconds, 0 or more",
    );
    fails_with(
        &["serve", "--write-stall-timeout=NaN"],
        None,
        1,
        "--write-stall-timeout must be a number of seconds, 0 or more",
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
    let comments = dir.path().join("comments");
    std::fs::write(&comments, "# no token here\n\n").unwrap();
    fails_with(
        &["serve", "--token-file", comments.to_str().unwrap()],
        None,
        1,
        "is empty",
    );
    let spaced = dir.path().join("spaced");
    std::fs::write(&spaced, "first-token\nsecond token\n").unwrap();
    fails_with(
        &["serve", "--token-file", spaced.to_str().unwrap()],
        None,
        1,
        "line 2: a token has no spaces inside it (one token per line)",
    );
    let twice = dir.path().join("twice");
    std::fs::write(&twice, "same\nother\nsame\n").unwrap();
    fails_with(
        &["serve", "--token-file", twice.to_str().unwrap()],
        None,
        1,
        "line 3: the same token is on an earlier line",
    );
    fails_with(
        &["serve", "--max-registrations-per-token", "0"],
        None,
        1,
        "--max-registrations-per-token must be at least 1",
    );
    // Secure by default: a non-loopback bind needs a token or an explicit opt-out.
    fails_with(
        &["serve", "--bind", "0.0.0.0:0"],
        None,
        1,
        "refusing to serve on 0.0.0.0:0 without a token: anyone who can reach it could run code and fill its memory; give --token-file FILE, bind to 127.0.0.1, or pass --insecure-no-auth if the network is trusted",
    );
    // The memory budget holds no session: 2 check workers, the planning of a source and 64
    // calls at once set aside 68 whole sandbox memories (68 x 33.5 MiB with the overhead), more
    // than 1 GiB.
    fails_with(
        &["serve", "--memory-budget", "1G"],
        None,
        1,
        "not one session fits in the memory budget of 1 GiB: an idle session needs about 6 MiB, and ",
    );
    fails_with(
        &["serve", "--memory-budget", "1G"],
        None,
        1,
        " are set aside for 68 whole sandbox memories (",
    );
    fails_with(
        &["serve", "--memory-budget", "1G"],
        None,
        1,
        " each with its overhead: 2 check workers, the planning of a new source and 64 calls running at once); give a larger --memory-budget",
    );
    fails_with(
        &["serve", "--memory-limit", "1M"],
        None,
        1,
        "--memory-limit 1 MiB is too small",
    );
    fails_with(
        &["serve", "--memory-budget", "lots"],
        None,
        1,
        "'lots' is not a size: write bytes, or a number with K, M, G or T",
    );
    fails_with(
        &["serve", "--check-workers", "0"],
        None,
        1,
        "--check-workers must be at least 1",
    );
    fails_with(
        &["serve", "--bind", "nowhere"],
        None,
        1,
        "invalid value 'nowhere' for '--bind",
    );
}
