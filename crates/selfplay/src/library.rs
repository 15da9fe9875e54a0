//! The environment library of the designer's warm start (`spade sft`): environments gathered
//! at run time — the bundled starter environments and any directory a user passes, each
//! `<name>/env.py` with an optional `<name>/skill.txt` (the layout of `eval_envs/`) — checked
//! with `spade check` under self-play's validation settings, split into a training part and a
//! held-out fifth, and rendered as (design prompt → completion) pairs: the prompt is the one
//! self-play's designer gets ([`prompts::designer_prompt`] under [`prompts::DESIGNER_SYSTEM`]),
//! the completion the environment in one ```python block, exactly as
//! [`extract::python_block`] reads a design back.
//!
//! Everything here but [`read_dir`] (files) and [`check_library`] (the sandbox) is a function
//! of its arguments.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::oracles::Severity;
use spade_sandbox::Runtime;

use crate::corpus::Corpus;
use crate::error::{Result, TrainError};
use crate::extract;
use crate::memory::DesignerExamples;
use crate::prompts::{self, DesignSpec, Variant};
use crate::seeds;

/// One environment of the library, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryEnv {
    /// Its directory's name (unique in the library).
    pub name: String,
    /// `env.py`, with trailing whitespace cut to one newline (the form a design's code block
    /// reads back as).
    pub source: String,
    /// `skill.txt`, trimmed, if there is one.
    pub skill: Option<String>,
    /// Where it came from: `starter` or the directory it was read from.
    pub origin: String,
}

/// `source` with its trailing whitespace cut to a single newline.
pub fn normalise_source(source: &str) -> String {
    format!("{}\n", source.trim_end())
}

/// The bundled starter environments ([`crate::starter_envs`]), with no skill file.
pub fn starter_library() -> Vec<LibraryEnv> {
    crate::starter_envs::starter_envs()
        .into_iter()
        .map(|(name, source)| LibraryEnv {
            name,
            source: normalise_source(&source),
            skill: None,
            origin: "starter".into(),
        })
        .collect()
}

fn library_error(dir: &Path, why: impl std::fmt::Display) -> TrainError {
    TrainError::InvalidParameter(format!("library directory {}: {why}", dir.display()))
}

/// The environments of a library directory: every `<name>/env.py` (with `<name>/skill.txt`
/// when present), sorted by name. A missing directory, one without any `<name>/env.py`, an
/// unreadable file or an empty `skill.txt` is an error that names it.
pub fn read_dir(dir: &Path) -> Result<Vec<LibraryEnv>> {
    if !dir.is_dir() {
        return Err(library_error(dir, "does not exist or is not a directory"));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| TrainError::file("reading", dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| TrainError::file("reading", dir, e))?;
        let env_py = entry.path().join("env.py");
        if !env_py.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&env_py)
            .map_err(|e| TrainError::file("reading", &env_py, e))?;
        let skill_path = entry.path().join("skill.txt");
        let skill = if skill_path.is_file() {
            let text = std::fs::read_to_string(&skill_path)
                .map_err(|e| TrainError::file("reading", &skill_path, e))?;
            let skill = text.trim().to_string();
            if skill.is_empty() || skill.contains('\n') {
                return Err(library_error(
                    dir,
                    format!("{name}/skill.txt must hold one non-empty line"),
                ));
            }
            Some(skill)
        } else {
            None
        };
        out.push(LibraryEnv {
            name,
            source: normalise_source(&source),
            skill,
            origin: dir.display().to_string(),
        });
    }
    if out.is_empty() {
        return Err(library_error(dir, "holds no <name>/env.py"));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The library: the starter environments (unless `starters` is false) and each directory's,
/// in that order. Two environments with one name are an error that names both origins.
pub fn gather(starters: bool, dirs: &[PathBuf]) -> Result<Vec<LibraryEnv>> {
    let mut all = if starters {
        starter_library()
    } else {
        Vec::new()
    };
    for dir in dirs {
        all.extend(read_dir(dir)?);
    }
    let mut seen: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for env in &all {
        if let Some(first) = seen.insert(&env.name, &env.origin) {
            return Err(TrainError::InvalidParameter(format!(
                "the library has two environments named `{}` (from {first} and from {}): rename one",
                env.name, env.origin
            )));
        }
    }
    if all.is_empty() {
        return Err(TrainError::InvalidParameter(
            "the library is empty: pass --library DIR, or keep the starter environments".into(),
        ));
    }
    Ok(all)
}

/// How library environments are checked: self-play's validation settings
/// (`check_seeds`, `check_max_steps`, `validation_fuel`, see `rollout/validate.rs`), so that
/// an environment enters the library exactly when a design with its source would enter the
/// pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibraryCheck {
    /// Episodes per probe (`check_seeds`).
    pub seeds: u32,
    /// Steps per episode without `max_turns` (`check_max_steps`).
    pub max_steps: u32,
    /// Fuel for the whole check (`validation_fuel`).
    pub fuel: u64,
}

impl LibraryCheck {
    /// The settings of a self-play run's validation.
    pub fn from_train(cfg: &crate::TrainConfig) -> Self {
        Self {
            seeds: cfg.check_seeds,
            max_steps: cfg.check_max_steps,
            fuel: cfg.validation_fuel,
        }
    }

    fn options(&self) -> CheckOptions {
        CheckOptions {
            seeds: self.seeds,
            max_steps: self.max_steps,
            fuel_budget: Some(self.fuel),
            ..CheckOptions::default()
        }
    }
}

/// A library environment that passed `spade check`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedEnv {
    /// The environment.
    pub env: LibraryEnv,
    /// The kind of environment: tool-use when it subclasses `ToolUseBaseEnv`, single-answer
    /// when its `max_turns` is 1, multi-turn otherwise.
    pub variant: Variant,
}

/// A library environment that `spade check` (or the round trip through a code block)
/// rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedEnv {
    /// Its name.
    pub name: String,
    /// Where it came from.
    pub origin: String,
    /// The codes of its error findings (`fence` when its source holds ``` and so cannot be
    /// written in one code block).
    pub codes: Vec<String>,
}

/// The variant a checked environment fits (see [`CheckedEnv::variant`]).
pub fn variant_of(tool_use: bool, max_turns: Option<u32>) -> Variant {
    match (tool_use, max_turns) {
        (true, _) => Variant::ToolUse,
        (false, Some(1)) => Variant::SingleAnswer,
        (false, _) => Variant::MultiTurn,
    }
}

/// Checks every environment, in order; returns the accepted and the rejected ones.
pub async fn check_library(
    runtime: &Runtime,
    envs: Vec<LibraryEnv>,
    settings: &LibraryCheck,
) -> (Vec<CheckedEnv>, Vec<RejectedEnv>) {
    let opts = settings.options();
    let mut ok = Vec::new();
    let mut rejected = Vec::new();
    for env in envs {
        if env.source.contains("```") {
            rejected.push(RejectedEnv {
                name: env.name,
                origin: env.origin,
                codes: vec!["fence".into()],
            });
            continue;
        }
        let report = check(runtime, &env.source, &opts).await;
        if report.accepted {
            ok.push(CheckedEnv {
                variant: variant_of(report.tool_use, report.max_turns),
                env,
            });
        } else {
            let codes = report
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .map(|f| f.code.clone())
                .collect();
            rejected.push(RejectedEnv {
                name: env.name,
                origin: env.origin,
                codes,
            });
        }
    }
    (ok, rejected)
}

/// FNV-1a of a name: the stable hash the split and the pairs' choices use.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How many of `n` environments are held out: `n / 5` rounded to the nearest whole number
/// (`(n + 2) / 5`): 0 of 1 or 2, 1 of 3 to 7, 2 of 8 to 12.
pub fn held_out_count(n: usize) -> usize {
    (n + 2) / 5
}

/// Splits the library into (training, held out): the environments are ordered by
/// `seeds::mix(seed, name_hash(name))` (ties by name) and the first [`held_out_count`] are
/// held out. The split depends only on the seed and the names, not on the order the library
/// was read in; each part keeps the library's order.
pub fn split_held_out(envs: Vec<CheckedEnv>, seed: u64) -> (Vec<CheckedEnv>, Vec<CheckedEnv>) {
    let mut order: Vec<(u64, &str)> = envs
        .iter()
        .map(|e| {
            (
                seeds::mix(seed, name_hash(&e.env.name)),
                e.env.name.as_str(),
            )
        })
        .collect();
    order.sort();
    let held: std::collections::HashSet<String> = order
        .iter()
        .take(held_out_count(envs.len()))
        .map(|(_, n)| (*n).to_string())
        .collect();
    envs.into_iter().partition(|e| !held.contains(&e.env.name))
}

/// One (design prompt → completion) pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignPair {
    /// The library environment it renders.
    pub name: String,
    /// What the prompt asks for.
    pub spec: DesignSpec,
    /// The system message ([`prompts::DESIGNER_SYSTEM`]).
    pub system: String,
    /// The designer's user message.
    pub user: String,
    /// The reply: the environment in one ```python block.
    pub completion: String,
}

/// The reply that carries `source` (normalised, without ```): one ```python block, which
/// [`extract::python_block`] reads back as `source`.
pub fn completion_for(source: &str) -> String {
    format!("```python\n{}\n```", source.trim_end())
}

/// The design spec an environment answers: its `skill.txt` (else one of
/// [`prompts::SKILLS`], picked by the name's hash), difficulty `medium` (a library
/// environment's difficulty is unknown; the middle level claims least), its variant, and a
/// corpus document drawn with a seed derived from `seed` and the name.
pub fn spec_for(env: &CheckedEnv, corpus: &Corpus, seed: u64) -> DesignSpec {
    let h = name_hash(&env.env.name);
    let skill = env
        .env
        .skill
        .clone()
        .unwrap_or_else(|| prompts::SKILLS[(h % prompts::SKILLS.len() as u64) as usize].into());
    let doc = corpus.sample(seeds::derive(seed, "sft-doc", &[h]));
    DesignSpec {
        skill,
        difficulty: "medium".into(),
        variant: env.variant,
        doc_id: doc.id,
    }
}

/// The pair of each environment, in order: the designer's prompt as self-play builds it (no
/// memory examples: a run's first design round has none) and the environment as its reply.
pub fn design_pairs(envs: &[CheckedEnv], corpus: &Corpus, seed: u64) -> Vec<DesignPair> {
    envs.iter()
        .map(|e| {
            let spec = spec_for(e, corpus, seed);
            let doc = corpus
                .docs()
                .iter()
                .find(|d| d.id == spec.doc_id)
                .map_or("", |d| d.text.as_str());
            DesignPair {
                name: e.env.name.clone(),
                user: prompts::designer_prompt(&spec, doc, &DesignerExamples::default()),
                spec,
                system: prompts::DESIGNER_SYSTEM.into(),
                completion: completion_for(&e.env.source),
            }
        })
        .collect()
}

/// Whether a pair's completion reads back as `source` through the design extractor.
pub fn round_trips(pair: &DesignPair, source: &str) -> bool {
    extract::python_block(&pair.completion).as_deref() == Some(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(name: &str, source: &str, variant: Variant) -> CheckedEnv {
        CheckedEnv {
            env: LibraryEnv {
                name: name.into(),
                source: normalise_source(source),
                skill: None,
                origin: "test".into(),
            },
            variant,
        }
    }

    fn corpus() -> Corpus {
        Corpus::parse(
            "{\"text\": \"Doc zero about primes.\"}\n{\"text\": \"Doc one about maps.\"}\n",
            100,
        )
        .unwrap()
    }

    #[test]
    fn every_starter_pair_reads_back_as_its_source() {
        let envs: Vec<CheckedEnv> = starter_library()
            .into_iter()
            .map(|env| CheckedEnv {
                env,
                variant: Variant::MultiTurn,
            })
            .collect();
        let pairs = design_pairs(&envs, &corpus(), 1);
        assert_eq!(pairs.len(), 6);
        for (pair, env) in pairs.iter().zip(&envs) {
            assert!(round_trips(pair, &env.env.source), "{}", pair.name);
            assert_eq!(
                extract::python_block(&pair.completion).unwrap(),
                env.env.source
            );
        }
    }

    #[test]
    fn a_pair_is_the_designers_own_prompt() {
        let env = CheckedEnv {
            env: LibraryEnv {
                skill: Some("Optimization".into()),
                ..checked("cheap", "class CheapEnv:\n    pass\n\n\n", Variant::ToolUse).env
            },
            variant: Variant::ToolUse,
        };
        let c = corpus();
        let pair = &design_pairs(std::slice::from_ref(&env), &c, 9)[0];
        assert_eq!(pair.spec.skill, "Optimization");
        assert_eq!(pair.spec.difficulty, "medium");
        assert_eq!(pair.spec.variant, Variant::ToolUse);
        let doc = &c.docs()[pair.spec.doc_id].text;
        assert_eq!(
            pair.user,
            prompts::designer_prompt(&pair.spec, doc, &DesignerExamples::default())
        );
        assert!(pair.user.contains(doc.as_str()));
        assert_eq!(pair.system, prompts::DESIGNER_SYSTEM);
        assert_eq!(pair.completion, "```python\nclass CheapEnv:\n    pass\n```");
        // Trailing blank lines are cut to one newline, the form the extractor gives back.
        assert_eq!(
            extract::python_block(&pair.completion).unwrap(),
            "class CheapEnv:\n    pass\n"
        );
        // Without skill.txt the skill is one of the prompt's skills, fixed by the name.
        let plain = checked("cheap", "x = 1\n", Variant::SingleAnswer);
        let s1 = spec_for(&plain, &c, 9);
        assert!(prompts::SKILLS.contains(&s1.skill.as_str()));
        assert_eq!(s1, spec_for(&plain, &c, 9));
    }

    #[test]
    fn the_variant_follows_tool_use_and_max_turns() {
        assert_eq!(variant_of(true, Some(1)), Variant::ToolUse);
        assert_eq!(variant_of(false, Some(1)), Variant::SingleAnswer);
        assert_eq!(variant_of(false, Some(5)), Variant::MultiTurn);
        assert_eq!(variant_of(false, None), Variant::MultiTurn);
    }

    #[test]
    fn a_fifth_is_held_out_by_name_whatever_the_order() {
        assert_eq!(
            (0..=12).map(held_out_count).collect::<Vec<_>>(),
            vec![0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2]
        );
        let names: Vec<String> = (0..10).map(|i| format!("env_{i}")).collect();
        let envs: Vec<CheckedEnv> = names
            .iter()
            .map(|n| checked(n, "x = 1\n", Variant::MultiTurn))
            .collect();
        let (train, held) = split_held_out(envs.clone(), 4);
        assert_eq!((train.len(), held.len()), (8, 2));
        // The held-out ones are the two smallest keys, computed here by hand.
        let mut keys: Vec<(u64, &String)> = names
            .iter()
            .map(|n| (seeds::mix(4, name_hash(n)), n))
            .collect();
        keys.sort();
        let mut expected: Vec<&String> = keys[..2].iter().map(|(_, n)| *n).collect();
        expected.sort();
        let mut got: Vec<&String> = held.iter().map(|e| &e.env.name).collect();
        got.sort();
        assert_eq!(got, expected);
        // Reversing the library's order holds out the same names; another seed may not.
        let mut rev = envs.clone();
        rev.reverse();
        let (_, held_rev) = split_held_out(rev, 4);
        let mut got_rev: Vec<&String> = held_rev.iter().map(|e| &e.env.name).collect();
        got_rev.sort();
        assert_eq!(got_rev, expected);
        // Nothing is in both parts, nothing is lost.
        assert!(
            train
                .iter()
                .all(|t| !held.iter().any(|h| h.env.name == t.env.name))
        );
    }

    #[test]
    fn fnv_hash_matches_its_reference_values() {
        // FNV-1a 64 of "" and "a" (the published test vectors).
        assert_eq!(name_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(name_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spade-library-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_directory_reads_env_and_skill_and_bad_ones_say_why() {
        let d = tmp("read");
        std::fs::create_dir_all(d.join("b_env")).unwrap();
        std::fs::write(d.join("b_env/env.py"), "class BEnv: pass\n\n").unwrap();
        std::fs::create_dir_all(d.join("a_env")).unwrap();
        std::fs::write(d.join("a_env/env.py"), "class AEnv: pass").unwrap();
        std::fs::write(d.join("a_env/skill.txt"), "Optimization\n").unwrap();
        std::fs::create_dir_all(d.join("notes")).unwrap();
        let envs = read_dir(&d).unwrap();
        let names: Vec<&str> = envs.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a_env", "b_env"]);
        assert_eq!(envs[0].skill.as_deref(), Some("Optimization"));
        assert_eq!(envs[0].source, "class AEnv: pass\n");
        assert_eq!(envs[1].skill, None);
        assert_eq!(envs[1].source, "class BEnv: pass\n");

        let missing = d.join("nope");
        assert_eq!(
            read_dir(&missing).unwrap_err().to_string(),
            format!(
                "invalid parameter: library directory {}: does not exist or is not a directory",
                missing.display()
            )
        );
        let empty = tmp("empty");
        assert_eq!(
            read_dir(&empty).unwrap_err().to_string(),
            format!(
                "invalid parameter: library directory {}: holds no <name>/env.py",
                empty.display()
            )
        );
        std::fs::write(d.join("a_env/skill.txt"), "  \n").unwrap();
        assert_eq!(
            read_dir(&d).unwrap_err().to_string(),
            format!(
                "invalid parameter: library directory {}: a_env/skill.txt must hold one non-empty line",
                d.display()
            )
        );
        // A directory with a starter's name clashes with the starter.
        let clash = tmp("clash");
        std::fs::create_dir_all(clash.join("grid_walk")).unwrap();
        std::fs::write(clash.join("grid_walk/env.py"), "x = 1\n").unwrap();
        assert_eq!(
            gather(true, std::slice::from_ref(&clash))
                .unwrap_err()
                .to_string(),
            format!(
                "invalid parameter: the library has two environments named `grid_walk` (from starter and from {}): rename one",
                clash.display()
            )
        );
        assert_eq!(
            gather(false, std::slice::from_ref(&clash)).unwrap().len(),
            1
        );
        assert_eq!(
            gather(false, &[]).unwrap_err().to_string(),
            "invalid parameter: the library is empty: pass --library DIR, or keep the starter environments"
        );
        for p in [d, empty, clash] {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}
