//! The designer's verdicts: redraws with fresh documents, every design kept with its verdict
//! (`designs/`, `rejected/`), and the measurement `spade eval --designer` reports, all driven
//! by scripted policies through the training loop's own design and validate phases.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use spade_model::chat::Message;
use spade_selfplay::designer::{self, Cause};
use spade_selfplay::{Corpus, Role, Run, Scripted, TrainConfig};

use crate::common::{env_source, runtime};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-designs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn fenced(source: &str) -> String {
    format!("Here it is.\n```python\n{source}```\n")
}

/// Five documents, each with its own marker word.
fn corpus() -> Corpus {
    let lines: Vec<String> = ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO"]
        .iter()
        .map(|m| format!("{{\"text\": \"Document {m} about numbers.\"}}"))
        .collect();
    Corpus::parse(&lines.join("\n"), 6000).unwrap()
}

/// The marker of the document a designer prompt carries.
fn marker(prompt: &str) -> String {
    ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO"]
        .iter()
        .find(|m| prompt.contains(*m))
        .map(|m| m.to_string())
        .unwrap_or_else(|| panic!("no document in {prompt}"))
}

/// Designer replies in order (the last repeats); every designer prompt is recorded. The agent
/// answers 0, the hint is fixed.
fn scripted(designs: Vec<String>, prompts: Arc<Mutex<Vec<String>>>) -> Scripted {
    let mut k = 0;
    Scripted::new(
        Box::new(move |role: Role, msgs: &[Message]| match role {
            Role::Designer | Role::Repair => {
                prompts.lock().unwrap().push(msgs[1].content.clone());
                let d = designs[k.min(designs.len() - 1)].clone();
                k += 1;
                d
            }
            Role::Hint => "Work it out.".into(),
            Role::Agent => "\\boxed{0}".into(),
        }),
        None,
    )
}

fn cfg() -> TrainConfig {
    TrainConfig {
        designs_per_round: 1,
        designer_group: 1,
        games_per_rollout: 1,
        plays_per_game: 1,
        hint_plays: 1,
        max_turns: 3,
        designer_delay: 0,
        max_repair_attempts: 0,
        design_redraws: 5,
        max_agent_update_samples: 0,
        ..TrainConfig::default()
    }
}

/// The `rejected/` records of a run, sorted by file name.
fn rejected(dir: &Path) -> Vec<serde_json::Value> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join("rejected"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn codes(record: &serde_json::Value) -> Vec<String> {
    record["codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_design_that_fails_twice_is_redrawn_with_fresh_documents_and_the_third_joins_the_pool() {
    let dir = tmp("redraw");
    let valid = fenced(&env_source("arithmetic_puzzle"));
    let syntax = fenced(&env_source("fault_syntax_error"));
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut policy = scripted(
        vec!["I cannot write code.".into(), syntax, valid.clone()],
        Arc::clone(&prompts),
    );
    let mut run = Run::create(&dir, cfg(), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    // One design, drawn three times: two redraws, no repairs, and the third is valid.
    assert_eq!(
        (m.designs, m.redraws, m.repair_attempts, m.valid, m.repaired),
        (1, 2, 0, 1, 0)
    );
    assert_eq!(run.state.pool.len(), 1);
    assert_eq!(run.state.pool[0].class_name, "ArithmeticPuzzleEnv");
    // Three prompts, three different documents.
    let prompts = prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 3);
    let mut docs: Vec<String> = prompts.iter().map(|p| marker(p)).collect();
    assert_eq!(run.state.pool[0].doc_id, Some(corpus_id(&docs[2])));
    docs.sort();
    docs.dedup();
    assert_eq!(docs.len(), 3, "{prompts:?}");
    // The valid draw trains as a first attempt of its own (not a repaired one).
    assert_eq!(m.designer_trained_from, vec![0]);
    assert_eq!(m.repaired_first_attempts, 0);
    assert_eq!(m.designer_samples_trained, 1);
    // Its design record says which draw it was; the two failed draws are in rejected/.
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("designs/env00000.json")).unwrap())
            .unwrap();
    assert_eq!(record["draw"], 2);
    let rej = rejected(&dir);
    assert_eq!(rej.len(), 2);
    assert_eq!(
        (rej[0]["draw"].as_u64(), rej[1]["draw"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(codes(&rej[0]), vec!["no_code"]);
    assert_eq!(rej[0]["cause"], "no_code");
    assert_eq!(rej[0]["completion"], "I cannot write code.");
    assert_eq!(codes(&rej[1]), vec!["load_failed"]);
    assert_eq!(rej[1]["cause"], "syntax");
    for (r, p) in rej.iter().zip(&prompts) {
        assert_eq!(r["prompt"].as_str(), Some(p.as_str()));
        assert_eq!(r["doc_id"].as_u64(), Some(corpus_id(&marker(p)) as u64));
        assert_eq!(r["spec"]["doc_id"], r["doc_id"]);
        assert_eq!(r["messages"].as_array().unwrap().len(), 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The corpus id of the document with `marker`.
fn corpus_id(marker: &str) -> usize {
    ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO"]
        .iter()
        .position(|m| *m == marker)
        .unwrap()
}

#[tokio::test]
async fn without_redraws_a_rejected_design_lands_in_rejected_with_its_codes() {
    let dir = tmp("rejected");
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let no_class = fenced(&env_source("fault_no_env_class"));
    let mut policy = scripted(vec![no_class.clone()], Arc::clone(&prompts));
    let cfg = TrainConfig {
        design_redraws: 0,
        max_repair_attempts: 1,
        ..cfg()
    };
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!(
        (m.designs, m.redraws, m.repair_attempts, m.valid),
        (1, 0, 1, 0)
    );
    assert!(run.state.pool.is_empty());
    assert!(!dir.join("designs").exists());
    let rej = rejected(&dir);
    assert_eq!(rej.len(), 1);
    assert_eq!(codes(&rej[0]), vec!["load_failed"]);
    assert_eq!(rej[0]["cause"], "no_env_class");
    assert_eq!(rej[0]["completion"], no_class.as_str());
    let messages = rej[0]["messages"].as_array().unwrap();
    assert!(
        messages[0]
            .as_str()
            .unwrap()
            .contains("no environment class found"),
        "{messages:?}"
    );
    // The first attempt and its repair, each with its errors.
    assert_eq!(rej[0]["attempts"].as_array().unwrap().len(), 4);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_designer_report_counts_a_scripted_mix_with_hand_computed_intervals() {
    let dir = tmp("eval");
    let arith = env_source("arithmetic_puzzle");
    let grid = env_source("grid_walk");
    let guess = fenced(starter("guess_three"));
    let cut = "x".repeat(6000);
    let prompts = Arc::new(Mutex::new(Vec::new()));
    // Five prompts' first attempts, then one redraw round for the three that failed, in order.
    let mut policy = scripted(
        vec![
            fenced(&arith),
            cut.clone(),
            "No code today.".into(),
            fenced(&env_source("fault_syntax_error")),
            fenced(&grid),
            guess,
            "Still no code.".into(),
            fenced(&env_source("fault_syntax_error")),
        ],
        Arc::clone(&prompts),
    );
    let cfg = TrainConfig {
        designs_per_round: 5,
        design_redraws: 1,
        designer_max_new_tokens: 6000,
        ..cfg()
    };
    let mut run = Run::for_designs(&dir, cfg, corpus(), runtime(), &mut policy).unwrap();
    let outcomes = run.design_round().await.unwrap();
    let causes: Vec<Cause> = outcomes.iter().map(|o| o.first_cause.clone()).collect();
    assert_eq!(
        causes,
        vec![
            Cause::Valid,
            Cause::Cut,
            Cause::NoCode,
            Cause::Syntax,
            Cause::Valid
        ]
    );
    let draws: Vec<usize> = outcomes.iter().map(|o| o.draws).collect();
    assert_eq!(draws, vec![1, 2, 2, 2, 1]);
    // The reference set holds arithmetic_puzzle: that design is a copy, the other two novel.
    let report = designer::report(&outcomes, std::slice::from_ref(&arith), 0.5);
    assert_eq!(report.prompts, 5);
    assert_eq!(report.draws, 8);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    // Valid at the first attempt: 2 of 5, Wilson [0.117621, 0.769276].
    assert_eq!(
        (report.first_attempt.count, report.first_attempt.total),
        (2, 5)
    );
    assert!(close(report.first_attempt.rate, 0.4));
    assert!(close(report.first_attempt.ci_low, 0.117_620_774_232_647_8));
    assert!(close(report.first_attempt.ci_high, 0.769_275_718_723_987));
    // Within one redraw: 3 of 5, Wilson [0.230724, 0.882379].
    assert_eq!(report.within_budget.count, 3);
    assert!(close(report.within_budget.ci_low, 0.230_724_281_276_012_8));
    assert!(close(report.within_budget.ci_high, 0.882_379_225_767_352));
    // One of each failure cause, each 1 of 5, Wilson [0.036224, 0.624465].
    let failures: Vec<(&str, usize)> = report
        .failures
        .iter()
        .map(|(k, r)| (k.as_str(), r.count))
        .collect();
    assert_eq!(failures, vec![("cut", 1), ("no_code", 1), ("syntax", 1)]);
    let cut_rate = &report.failures["cut"];
    assert!(close(cut_rate.ci_low, 0.036_224_108_632_430_14));
    assert!(close(cut_rate.ci_high, 0.624_465_370_237_474_7));
    // Novel: 2 of the 3 valid designs, Wilson [0.207660, 0.938508].
    assert_eq!((report.novel.count, report.novel.total), (2, 3));
    assert!(close(report.novel.ci_low, 0.207_659_600_802_047_7));
    assert!(close(report.novel.ci_high, 0.938_508_055_279_603_7));
    // Every design is kept: three valid in designs/, the five failed draws in rejected/.
    assert_eq!(std::fs::read_dir(dir.join("designs")).unwrap().count(), 3);
    let rej = rejected(&dir);
    let causes: Vec<&str> = rej.iter().map(|r| r["cause"].as_str().unwrap()).collect();
    assert_eq!(
        causes,
        vec!["cut", "no_code", "no_code", "syntax", "syntax"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bundled starter environment's source.
fn starter(name: &str) -> &'static str {
    spade_selfplay::starter_envs::STARTER_ENVS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap()
}

#[tokio::test]
async fn the_example_environment_passes_check_is_shown_when_asked_and_a_copy_is_not_novel() {
    use spade_envtools::check::{CheckOptions, check};
    use spade_selfplay::config::DESIGNER_EXAMPLE_ENV;
    let report = check(&runtime(), DESIGNER_EXAMPLE_ENV, &CheckOptions::default()).await;
    assert!(report.accepted, "{:#?}", report.findings);
    assert_eq!(report.class_name.as_deref(), Some("StackSortEnv"));
    let lines = DESIGNER_EXAMPLE_ENV.lines().count();
    assert!((60..=80).contains(&lines), "{lines} lines");
    // Off by default: the prompt does not carry it; on, it does.
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut policy = scripted(vec![fenced(DESIGNER_EXAMPLE_ENV)], Arc::clone(&prompts));
    let dir = tmp("example");
    let on = TrainConfig {
        designer_example_env: true,
        ..cfg()
    };
    let mut run = Run::for_designs(&dir, on, corpus(), runtime(), &mut policy).unwrap();
    let outcomes = run.design_round().await.unwrap();
    assert!(prompts.lock().unwrap()[0].contains("class StackSortEnv"));
    // The designer copied the example it was shown: valid, and not novel.
    assert_eq!(outcomes[0].first_cause, Cause::Valid);
    assert_eq!(outcomes[0].shown, vec![DESIGNER_EXAMPLE_ENV.to_string()]);
    let report = designer::report(&outcomes, &[], 0.5);
    assert_eq!((report.novel.count, report.novel.total), (0, 1));
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let mut policy = scripted(vec!["no".into()], Arc::clone(&prompts));
    let mut run = Run::for_designs(&dir, cfg(), corpus(), runtime(), &mut policy).unwrap();
    let outcomes = run.design_round().await.unwrap();
    assert!(!prompts.lock().unwrap()[0].contains("class StackSortEnv"));
    assert!(outcomes[0].shown.is_empty());
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_designer_samples_with_its_own_top_p_and_top_k() {
    let cfg = TrainConfig {
        designer_top_p: Some(0.9),
        designer_top_k: 20,
        ..TrainConfig::default()
    };
    let s = cfg.sampling();
    assert_eq!(
        (s.top_p(Role::Designer), s.top_k(Role::Designer)),
        (0.9, 20)
    );
    assert_eq!((s.top_p(Role::Repair), s.top_k(Role::Repair)), (0.9, 20));
    assert_eq!((s.top_p(Role::Agent), s.top_k(Role::Agent)), (0.95, 0));
    assert_eq!((s.top_p(Role::Hint), s.top_k(Role::Hint)), (0.95, 0));
    // Unset, the designer samples as every role did before.
    let s = TrainConfig::default().sampling();
    assert_eq!(
        (s.top_p(Role::Designer), s.top_k(Role::Designer)),
        (0.95, 0)
    );
    let err = TrainConfig {
        designer_top_p: Some(1.5),
        ..TrainConfig::default()
    }
    .validate()
    .unwrap_err();
    assert!(
        err.to_string().contains("designer_top_p must be in (0, 1]"),
        "{err}"
    );
}

#[test]
fn the_designer_samples_with_dry_only_when_asked_and_bad_settings_are_refused() {
    use spade_model::dry::Dry;
    use spade_selfplay::remote::InferenceConfig;
    // Off by default, for every role.
    let s = TrainConfig::default().sampling();
    for role in [Role::Designer, Role::Repair, Role::Hint, Role::Agent] {
        assert_eq!(s.dry(role), None);
    }
    // On, for the designer and its repairs only.
    let on = TrainConfig {
        designer_dry_multiplier: 0.8,
        ..TrainConfig::default()
    };
    on.validate().unwrap();
    let want = Some(Dry {
        multiplier: 0.8,
        base: 1.75,
        allowed_length: 16,
    });
    let s = on.sampling();
    assert_eq!((s.dry(Role::Designer), s.dry(Role::Repair)), (want, want));
    assert_eq!((s.dry(Role::Hint), s.dry(Role::Agent)), (None, None));
    let refused = |cfg: TrainConfig, msg: &str| {
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains(msg), "{err}");
    };
    refused(
        TrainConfig {
            designer_dry_multiplier: -1.0,
            ..TrainConfig::default()
        },
        "designer_dry_*: the DRY multiplier must be finite and >= 0, got -1",
    );
    refused(
        TrainConfig {
            designer_dry_base: 0.9,
            ..on.clone()
        },
        "designer_dry_*: the DRY base must be finite and >= 1, got 0.9",
    );
    refused(
        TrainConfig {
            designer_dry_allowed_length: 0,
            ..on.clone()
        },
        "designer_dry_*: the DRY allowed length must be at least 1 token",
    );
    refused(
        TrainConfig {
            inference: Some(InferenceConfig {
                url: "http://127.0.0.1:1".into(),
                model: "m".into(),
                ..InferenceConfig::default()
            }),
            ..on
        },
        "designer_dry_multiplier > 0 needs in-process sampling",
    );
}

#[test]
fn the_designer_writes_under_the_python_guard_only_when_asked() {
    use spade_model::pyguard::PythonGuard;
    use spade_selfplay::remote::InferenceConfig;
    let s = TrainConfig::default().sampling();
    for role in [Role::Designer, Role::Repair, Role::Hint, Role::Agent] {
        assert_eq!(s.python_guard(role), None);
    }
    let on = TrainConfig {
        designer_python_guard: true,
        ..TrainConfig::default()
    };
    on.validate().unwrap();
    let s = on.sampling();
    // The designer's code is its first ```python fence: the guard starts before it.
    for role in [Role::Designer, Role::Repair] {
        assert_eq!(s.python_guard(role), Some(PythonGuard::fenced()));
    }
    assert_eq!(
        (s.python_guard(Role::Hint), s.python_guard(Role::Agent)),
        (None, None)
    );
    let err = TrainConfig {
        inference: Some(InferenceConfig {
            url: "http://127.0.0.1:1".into(),
            model: "m".into(),
            ..InferenceConfig::default()
        }),
        ..on
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("designer_python_guard needs in-process sampling"),
        "{err}"
    );
}

/// `spade eval --designer` refuses bad flags before it loads a model, each with its message.
#[test]
fn eval_designer_errors_are_clear() {
    use crate::common::fails_with;
    // Flag errors exit 1 like every other error of spade.
    fails_with(&["eval", "--designer"], None, 1, "--out <DIR>");
    fails_with(
        &["eval", "--designer", "--out", "x", "--envs", "eval_envs"],
        None,
        1,
        "cannot be used with",
    );
    let out = tmp("cli-out");
    std::fs::create_dir_all(out.join("rejected")).unwrap();
    let o = out.to_str().unwrap();
    fails_with(
        &["eval", "--designer", "--out", o],
        None,
        1,
        &format!("--out {o} already holds rejected from an earlier measurement: give a new folder"),
    );
    let _ = std::fs::remove_dir_all(&out);
    fails_with(
        &["eval", "--designer", "--out", o, "--prompts", "0"],
        None,
        1,
        "--prompts must be at least 1",
    );
    fails_with(
        &["eval", "--designer", "--out", o, "--novelty-threshold", "0"],
        None,
        1,
        "--novelty-threshold must be in (0, 1], not 0",
    );
    fails_with(
        &[
            "eval",
            "--designer",
            "--out",
            o,
            "--reference-envs",
            "tests/envs/none-here",
        ],
        None,
        1,
        "reading --reference-envs tests/envs/none-here",
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A scripted designer whose "tokens" are bytes, in a context of `ctx` bytes; records the
/// completion budget of every designer request.
struct Measured {
    inner: Scripted,
    ctx: usize,
    budgets: Arc<Mutex<Vec<usize>>>,
}

impl spade_selfplay::Policy for Measured {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        max_new_tokens: usize,
        seed: u64,
    ) -> spade_selfplay::error::Result<Vec<spade_selfplay::policy::Sampled>> {
        if role == Role::Designer {
            self.budgets.lock().unwrap().push(max_new_tokens);
        }
        self.inner.sample(role, messages, n, max_new_tokens, seed)
    }

    fn measure(
        &self,
        messages: &[Message],
    ) -> spade_selfplay::error::Result<Option<(usize, usize)>> {
        let bytes = messages.iter().map(|m| m.content.len()).sum();
        Ok(Some((self.ctx, bytes)))
    }

    fn update(
        &mut self,
        batch: &[spade_model::grpo::GrpoSample],
    ) -> spade_selfplay::error::Result<Option<spade_model::grpo::UpdateStats>> {
        self.inner.update(batch)
    }

    fn save(&self, dir: &Path) -> spade_selfplay::error::Result<()> {
        self.inner.save(dir)
    }

    fn load(&mut self, dir: &Path) -> spade_selfplay::error::Result<()> {
        self.inner.load(dir)
    }
}

#[tokio::test]
async fn a_design_budget_up_to_the_context_trims_the_document_so_that_both_fit() {
    // A 400-word document (w0 ... w399, 1,889 bytes with the spaces).
    let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    let doc = words.join(" ");
    let corpus = Corpus::parse(&format!("{{\"text\": \"{doc}\"}}"), 6000).unwrap();
    let (ctx, want) = (6000, 3000);
    for fill in [false, true] {
        let dir = tmp(&format!("budget-{fill}"));
        let prompts = Arc::new(Mutex::new(Vec::new()));
        let budgets = Arc::new(Mutex::new(Vec::new()));
        let mut policy = Measured {
            inner: scripted(vec!["no code".into()], Arc::clone(&prompts)),
            ctx,
            budgets: Arc::clone(&budgets),
        };
        let cfg = TrainConfig {
            designer_fill_context: fill,
            designer_max_new_tokens: want,
            design_redraws: 0,
            ..cfg()
        };
        let mut run = Run::for_designs(&dir, cfg, corpus.clone(), runtime(), &mut policy).unwrap();
        run.design_round().await.unwrap();
        drop(run);
        let prompt = prompts.lock().unwrap()[0].clone();
        assert_eq!(budgets.lock().unwrap().clone(), vec![want]);
        let system = spade_selfplay::prompts::DESIGNER_SYSTEM.len();
        assert!(prompt.contains("w0 w1 w2"));
        if fill {
            // The prompt without the document leaves 6000 - 3000 - fixed bytes for it: less
            // than the document, so it is cut to its first words, and prompt + output fit.
            assert!(!prompt.contains("w399"), "the document was not trimmed");
            assert!(
                system + prompt.len() + want <= ctx,
                "{} bytes",
                prompt.len()
            );
        } else {
            assert!(prompt.contains("w398 w399"));
            assert!(system + prompt.len() + want > ctx);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
