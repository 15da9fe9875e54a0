//! `spade report`: charts, best/worst tables and links on a run directory built by hand in
//! the real metrics format, one clear message per kind of bad input, and a report on a real
//! (scripted) self-play run.
use std::path::{Path, PathBuf};

use spade_model::chat::Message;
use spade_selfplay::report::{ReportError, ReportOptions, write_report};
use spade_selfplay::rollout::{EnvMetrics, Metrics};
use spade_selfplay::state::{PoolEnv, RunState, save_checkpoint};
use spade_selfplay::{Corpus, Role, Run, Scripted, TrainConfig};

use crate::common::{self, env_source, runtime, spade, stderr, stdout};

fn env(id: &str, win: f64, win_hint: f64, regret: f64, timeout: bool) -> EnvMetrics {
    EnvMetrics {
        id: id.into(),
        skill: "Arithmetic".into(),
        win_rate: win,
        win_rate_hint: win_hint,
        regret,
        timeout,
    }
}

/// Four rollouts: two design rounds (validity 0.5, then 1.0), a timeout (env00002), a NaN
/// win rate in rollout 2 (written as `null`), per-env mean regrets 0.0 (env00000), 0.375
/// (env00001), 0.75 (env00003) and 0.125 (env00004).
fn metrics() -> Vec<Metrics> {
    let m = |rollout, designed, pool, envs: Vec<EnvMetrics>| Metrics {
        rollout,
        designed,
        pool_size: pool,
        games: envs.len(),
        envs,
        ..Metrics::default()
    };
    let mut r0 = m(
        0,
        true,
        2,
        vec![
            env("env00000", 1.0, 1.0, 0.0, false),
            env("env00001", 0.25, 0.75, 0.5, false),
        ],
    );
    (r0.designs, r0.valid, r0.validity_rate) = (2, 1, 0.5);
    (r0.win_rate, r0.win_rate_hint, r0.regret) = (0.625, 0.875, 0.25);
    let mut r1 = m(
        1,
        false,
        2,
        vec![
            env("env00001", 0.5, 0.75, 0.25, false),
            env("env00002", 0.0, 0.0, 0.0, true),
        ],
    );
    (r1.win_rate, r1.win_rate_hint, r1.regret, r1.timeouts) = (0.25, 0.375, 0.125, 1);
    let mut r2 = m(
        2,
        false,
        2,
        vec![
            env("env00000", 1.0, 1.0, 0.0, false),
            env("env00003", 0.0, 0.75, 0.75, false),
        ],
    );
    (r2.win_rate, r2.win_rate_hint, r2.regret) = (f64::NAN, 0.875, 0.375);
    let mut r3 = m(3, true, 3, vec![env("env00004", 0.5, 0.625, 0.125, false)]);
    (r3.designs, r3.valid, r3.validity_rate) = (1, 1, 1.0);
    (r3.win_rate, r3.win_rate_hint, r3.regret) = (0.5, 0.625, 0.125);
    r3.loss = Some(0.0123);
    vec![r0, r1, r2, r3]
}

fn pool_env(id: &str, class: &str, origin: &str, banned: bool) -> PoolEnv {
    PoolEnv {
        id: id.into(),
        source: String::new(),
        class_name: class.into(),
        skill: "Arithmetic".into(),
        difficulty: "medium".into(),
        variant: None,
        doc_id: None,
        tool_use: false,
        hint: None,
        created: 0,
        origin: origin.into(),
        design_file: (origin == "designed").then(|| format!("designs/{id}.json")),
        banned,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A run directory with config, metrics, a checkpoint, design records and trajectories.
fn fake_run(root: &Path) -> PathBuf {
    let run = root.join("run");
    write(&run.join("config.json"), &TrainConfig::default().to_json());
    let lines: Vec<String> = metrics()
        .iter()
        .map(|m| serde_json::to_string(m).unwrap() + "\n")
        .collect();
    write(&run.join("metrics.jsonl"), &lines.concat());
    let state = RunState {
        rollouts_done: 4,
        pool: vec![
            pool_env("env00000", "SeedEnv", "seed:arithmetic_puzzle", false),
            pool_env("env00001", "OneEnv", "designed", false),
            pool_env("env00002", "SpinEnv", "designed", true),
            pool_env("env00003", "ThreeEnv", "designed", false),
            pool_env("env00004", "FourEnv", "designed", false),
        ],
        ..RunState::default()
    };
    save_checkpoint(&run, &state, |_| Ok(())).unwrap();
    for id in ["env00001", "env00003"] {
        write(&run.join(format!("designs/{id}.json")), "{}");
    }
    for m in metrics() {
        for e in &m.envs {
            for tag in ["nohint-00", "hint-00"] {
                let name = format!("trajectories/r{:05}/{}-{tag}.jsonl", m.rollout, e.id);
                write(&run.join(name), "{}\n");
            }
        }
    }
    run
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `<g data-series="NAME">` group of an SVG.
fn series<'a>(svg: &'a str, name: &str) -> &'a str {
    let start = svg
        .find(&format!("data-series=\"{name}\""))
        .unwrap_or_else(|| panic!("no series {name} in\n{svg}"));
    let rest = &svg[start..];
    &rest[..rest.find("</g>").unwrap()]
}

/// Point counts of each polyline in a series group, and its marker count.
fn shape(group: &str) -> (Vec<usize>, usize) {
    let lines = group
        .split("<polyline points=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].split(' ').count())
        .collect();
    (lines, group.matches("<circle").count())
}

/// The `data-env` ids of a table's rows, in order.
fn table_ids(html: &str, id: &str) -> Vec<String> {
    let start = html.find(&format!("<table id=\"{id}\">")).unwrap();
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    table
        .split("data-env=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_string())
        .collect()
}

/// Every relative href in `html`, resolved against `dir`.
fn hrefs(html: &str, dir: &Path) -> Vec<PathBuf> {
    html.split("href=\"")
        .skip(1)
        .map(|s| {
            let href = &s[..s.find('"').unwrap()];
            dir.join(href.replace("%20", " "))
        })
        .collect()
}

#[test]
fn charts_show_every_rollout_with_gaps_for_missing_values() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path());
    let report = write_report(&run, &ReportOptions::default()).unwrap();
    let out = run.join("report");
    assert_eq!(report.out, out);
    let names: Vec<String> = report
        .files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "win_rate.svg",
            "regret.svg",
            "validity.svg",
            "pool_size.svg",
            "index.html"
        ]
    );
    let win = read(&out.join("win_rate.svg"));
    assert!(win.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    // Rollout 2's NaN win rate breaks the no-hint line: rollouts 0-1 joined, 3 a marker.
    assert_eq!(shape(series(&win, "without hint")), (vec![2], 1));
    assert_eq!(shape(series(&win, "with hint")), (vec![4], 0));
    let legend = &win[win
        .find("<g class=\"legend\">")
        .expect("two series, a legend")..];
    assert!(legend.contains(">without hint</text>") && legend.contains(">with hint</text>"));
    assert!(win.contains(">Win rate without and with the hint</text>"));
    assert!(win.contains(">Rollout</text>"));
    for tick in ["0.0", "0.2", "1.0"] {
        assert!(win.contains(&format!(">{tick}</text>")), "y tick {tick}");
    }
    for tick in ["0", "1", "2", "3"] {
        assert!(win.contains(&format!(">{tick}</text>")), "x tick {tick}");
    }
    assert_eq!(
        shape(series(&read(&out.join("regret.svg")), "regret")),
        (vec![4], 0)
    );
    let pool = read(&out.join("pool_size.svg"));
    assert_eq!(shape(series(&pool, "pool size")), (vec![4], 0));
    // Validity: only the two rollouts that designed, each with a marker.
    let validity = read(&out.join("validity.svg"));
    assert_eq!(shape(series(&validity, "validity rate")), (vec![2], 2));
    assert!(!validity.contains("class=\"note\""));
    // Plot area x from 64 to 624 over rollouts 0..3: rollout 3 at the right edge, at 1.0
    // (the top, y = 56).
    assert!(validity.contains("624.00,56.00"), "{validity}");
}

#[test]
fn best_and_worst_tables_rank_by_regret_and_link_their_files() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path());
    let options = ReportOptions { out: None, top: 2 };
    let report = write_report(&run, &options).unwrap();
    let ids = |v: &[spade_selfplay::report::EnvSummary]| {
        v.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&report.best), ["env00003", "env00001"]);
    assert_eq!(ids(&report.worst), ["env00002", "env00000"]);
    assert_eq!(report.envs_played, 5);
    assert_eq!(report.best[1].mean_regret, Some(0.375));
    assert_eq!(report.best[1].played, 2);
    assert_eq!(report.worst[0].timeouts, 1);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let html = read(&run.join("report/index.html"));
    assert_eq!(table_ids(&html, "best"), ["env00003", "env00001"]);
    assert_eq!(table_ids(&html, "worst"), ["env00002", "env00000"]);
    for text in [
        "<td>ThreeEnv</td><td>designed</td>",
        "<td>SeedEnv</td><td>seed:arithmetic_puzzle</td>",
        "<td class=\"n\">1 (banned)</td>",
        "<td>2 (rollouts 0..1)</td><td class=\"n\">0.375</td>",
        "href=\"../designs/env00003.json\"",
        "href=\"../trajectories/r00002/env00003-hint-00.jsonl\"",
        "href=\"../trajectories/r00000/env00001-nohint-00.jsonl\"",
        "href=\"../trajectories/r00001/env00001-hint-00.jsonl\"",
        "<summary>4 files</summary>",
        "href=\"win_rate.svg\"",
        "<tr><th>Rollouts</th><td>4 (0..3)</td></tr>",
        "<tr><th>Last loss</th><td>0.0123</td></tr>",
        "<tr><th>Valid designs</th><td>2 of 3 over 2 design rounds</td></tr>",
    ] {
        assert!(html.contains(text), "{text} not in\n{html}");
    }
    // The charts are inline, so index.html stands alone.
    assert_eq!(html.matches("<svg xmlns").count(), 4);
    // env00000 is a starter env with no design record.
    assert!(!html.contains("designs/env00000.json"));
    // Every link resolves from the report directory.
    for target in hrefs(&html, &run.join("report")) {
        assert!(
            target.exists(),
            "{} is linked but missing",
            target.display()
        );
    }
}

#[test]
fn a_report_elsewhere_links_back_and_is_byte_for_byte_repeatable() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path());
    let out = tmp.path().join("reports/with space");
    let options = ReportOptions {
        out: Some(out.clone()),
        top: 5,
    };
    let first = write_report(&run, &options).unwrap();
    let html = read(&out.join("index.html"));
    assert!(html.contains("href=\"../../run/metrics.jsonl\""), "{html}");
    for target in hrefs(&html, &out) {
        assert!(
            target.exists(),
            "{} is linked but missing",
            target.display()
        );
    }
    let bytes: Vec<Vec<u8>> = first
        .files
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    let again = write_report(&run, &options).unwrap();
    assert_eq!(again.files, first.files);
    for (f, b) in again.files.iter().zip(&bytes) {
        assert_eq!(&std::fs::read(f).unwrap(), b, "{} changed", f.display());
    }
    assert!(
        !out.read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp")),
        "no temporary files are left"
    );
}

#[test]
fn the_cli_prints_a_summary_and_the_paths_it_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path());
    let output = spade(&["report", run.to_str().unwrap(), "--top", "3"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "4 rollouts (0..3), 5 environments played",
        "last rollout 3: win rate 0.500 without hint, 0.625 with; regret 0.125; pool 3",
        "mean regret over rollouts 0.219; 2 of 3 designs valid over 2 design rounds; 1 timeouts",
        "best environment: env00003 (mean regret 0.750, played in 1 rollout)",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    let index = run.join("report").join("index.html");
    assert!(
        text.contains(&format!("wrote {}", index.display())),
        "{text}"
    );
    assert!(text.contains("validity.svg"));
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
}

#[test]
fn a_run_that_never_designed_says_so_in_the_validity_chart() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let m = Metrics {
        rollout: 0,
        pool_size: 1,
        envs: vec![env("env00000", 0.0, 1.0, 1.0, false)],
        ..Metrics::default()
    };
    write(
        &run.join("metrics.jsonl"),
        &(serde_json::to_string(&m).unwrap() + "\n"),
    );
    let report = write_report(&run, &ReportOptions::default()).unwrap();
    let validity = read(&run.join("report/validity.svg"));
    assert!(validity.contains(">no rollout designed environments</text>"));
    assert!(!validity.contains("<circle"));
    // One rollout: a marker in the middle of the plot, no line.
    let regret = read(&run.join("report/regret.svg"));
    assert_eq!(shape(series(&regret, "regret")), (vec![], 1));
    // No checkpoint: the tables show no class or origin, and the report says why.
    assert_eq!(report.warnings.len(), 1);
    assert!(
        report.warnings[0].contains("no complete checkpoint in"),
        "{:?}",
        report.warnings
    );
    let html = read(&run.join("report/index.html"));
    assert!(html.contains("class=\"warn\">warning: no complete checkpoint"));
    assert!(html.contains("<td>-</td><td>-</td>"), "{html}");
    assert!(html.contains("<p id=\"worst\">None.</p>"));
    // Only files that exist are linked.
    assert!(html.contains("<p>Run files: <a href=\"../metrics.jsonl\">metrics.jsonl</a>.</p>"));
}

// ---------------------------------------------------------------- bad input

/// Bad input: exit code 1 and `message` on stderr.
fn fails_with(args: &[&str], message: &str) {
    common::fails_with(args, None, 1, message);
}

#[test]
fn bad_run_directories_give_one_clear_message_each() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    fails_with(
        &["report", missing.to_str().unwrap()],
        &format!(
            "error: run directory '{}' does not exist",
            missing.display()
        ),
    );
    let file = tmp.path().join("file.txt");
    write(&file, "x");
    fails_with(
        &["report", file.to_str().unwrap()],
        &format!("'{}' is not a directory", file.display()),
    );
    let empty_dir = tmp.path().join("empty");
    std::fs::create_dir_all(&empty_dir).unwrap();
    fails_with(
        &["report", empty_dir.to_str().unwrap()],
        &format!(
            "'{}' is not a run directory: it has no metrics.jsonl",
            empty_dir.display()
        ),
    );
    let run = tmp.path().join("fresh");
    write(&run.join("metrics.jsonl"), "");
    fails_with(&["report", run.to_str().unwrap()], "no rollouts yet: ");
    let good = serde_json::to_string(&metrics()[0]).unwrap();
    let bad = tmp.path().join("bad");
    write(
        &bad.join("metrics.jsonl"),
        &format!("{good}\n{{\"rollout\": \"one\"}}\n{good}\n"),
    );
    fails_with(
        &["report", bad.to_str().unwrap()],
        &format!(
            "{} line 2: not a metrics record: invalid type: string \"one\"",
            bad.join("metrics.jsonl").display()
        ),
    );
    let garbage = tmp.path().join("garbage");
    write(
        &garbage.join("metrics.jsonl"),
        &format!("{good}\n\nnot json\n"),
    );
    fails_with(
        &["report", garbage.to_str().unwrap()],
        "line 3: not a metrics record",
    );
    // The library says the same, with the line number as a field.
    match write_report(&garbage, &ReportOptions::default()) {
        Err(ReportError::MalformedMetrics { line, .. }) => assert_eq!(line, 3),
        other => panic!("{other:?}"),
    }
    assert!(!garbage.join("report").exists(), "nothing written on error");
}

#[test]
fn bad_options_give_one_clear_message_each() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path());
    let run_arg = run.to_str().unwrap();
    fails_with(
        &["report", run_arg, "--top", "0"],
        "invalid value '0' for '--top <N>'",
    );
    fails_with(&["report"], "<RUN>");
    let blocker = tmp.path().join("blocker");
    write(&blocker, "a file");
    fails_with(
        &["report", run_arg, "--out", blocker.to_str().unwrap()],
        &format!("creating the report directory {}", blocker.display()),
    );
}

#[test]
fn an_unfinished_last_line_or_unreadable_checkpoint_is_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path());
    let metrics = run.join("metrics.jsonl");
    let mut text = read(&metrics);
    text.push_str("{\"rollout\":4,\"desig");
    write(&metrics, &text);
    let latest = read(&run.join("checkpoints/latest"));
    write(
        &run.join("checkpoints")
            .join(latest.trim())
            .join("state.json"),
        "{",
    );
    let output = spade(&["report", run.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("skipped an unfinished last line (a rollout still being written)"),
        "{err}"
    );
    assert!(
        err.contains("warning: cannot read the latest checkpoint"),
        "{err}"
    );
    assert!(stdout(&output).contains("4 rollouts (0..3)"));
}

// ---------------------------------------------------------------- a real run

/// Designer: the arithmetic fixture; agent: right only when the observation carries the hint.
fn script() -> spade_selfplay::policy::Script {
    let source = env_source("arithmetic_puzzle");
    Box::new(move |role: Role, msgs: &[Message]| match role {
        Role::Designer | Role::Repair => format!("Sure.\n```python\n{source}```\n"),
        Role::Hint => "Multiply first, then add.".to_string(),
        Role::Agent => {
            let obs = &msgs[1].content;
            let answer = obs
                .contains("HINT:")
                .then(|| {
                    obs.strip_prefix("Compute ")?
                        .split('.')
                        .next()
                        .map(str::to_owned)
                })
                .flatten()
                .and_then(|expr| {
                    let p: Vec<i64> = expr
                        .split_whitespace()
                        .filter_map(|t| t.parse().ok())
                        .collect();
                    (p.len() == 3).then(|| p[0] * p[1] + p[2])
                });
            format!("\\boxed{{{}}}", answer.unwrap_or(0))
        }
    })
}

#[tokio::test]
async fn a_scripted_self_play_run_reports_its_envs_with_working_links() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let cfg = TrainConfig {
        designs_per_round: 1,
        designer_group: 1,
        games_per_rollout: 1,
        plays_per_game: 2,
        hint_plays: 2,
        max_turns: 2,
        designer_delay: 0,
        max_repair_attempts: 0,
        ..TrainConfig::default()
    };
    let corpus =
        Corpus::parse("{\"text\": \"Multiplication is repeated addition.\"}", 100).unwrap();
    let mut policy = Scripted::new(script(), None);
    let mut run = Run::create(&dir, cfg, corpus, runtime(), &mut policy, vec![]).unwrap();
    run.run(2).await.unwrap();
    let report = write_report(&dir, &ReportOptions::default()).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(report.summary.rollouts, 2);
    // Both rollouts design (the pool is below min_games) and play their new env.
    assert_eq!(report.summary.design_rounds, 2);
    assert_eq!(report.summary.last_win_rate, Some(0.0));
    assert_eq!(report.summary.last_win_rate_hint, Some(1.0));
    let best = &report.best[0];
    assert_eq!(best.id, "env00000");
    assert_eq!(best.mean_regret, Some(1.0));
    let info = best.pool.as_ref().expect("in the latest checkpoint");
    assert_eq!(
        (info.class_name.as_str(), info.origin.as_str()),
        ("ArithmeticPuzzleEnv", "designed")
    );
    assert_eq!(best.design_file.as_deref(), Some("designs/env00000.json"));
    assert_eq!(best.trajectories.len(), 4);
    let html = read(&dir.join("report/index.html"));
    assert_eq!(table_ids(&html, "best"), ["env00000", "env00001"]);
    let links = hrefs(&html, &dir.join("report"));
    assert!(links.len() > 8, "{links:?}");
    for target in links {
        assert!(
            target.exists(),
            "{} is linked but missing",
            target.display()
        );
    }
    assert_eq!(
        shape(series(&read(&dir.join("report/win_rate.svg")), "with hint")),
        (vec![2], 0)
    );
}
