//! The designer's verdicts, measured (`spade eval --designer`, and every training run's
//! `designs/` and `rejected/` records): why a design was rejected ([`classify`]), whether a
//! valid one is new ([`ngram_jaccard`], [`is_novel`]), and the report over many designs with
//! 95% Wilson intervals ([`report`]). Pure functions of typed values; the sampling and the
//! checks are the training loop's own (`Run::design_round`).
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::eval::wilson;

/// Token n-gram length of the novelty measure.
pub const NOVELTY_NGRAM: usize = 5;

/// Default novelty threshold: a valid design whose 5-gram Jaccard similarity to an environment
/// it was shown or trained on is at least this is a near-copy. Half the 5-grams shared means
/// whole methods were carried over; renamed variables alone leave most 5-grams intact.
pub const DEFAULT_NOVELTY_THRESHOLD: f64 = 0.5;

/// One error finding of a rejected attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The check code (`spade check`'s, or `no_code`).
    pub code: String,
    /// What went wrong.
    pub message: String,
}

/// The error findings of a rejected attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// Findings in the order the check reported them.
    pub findings: Vec<Finding>,
}

impl Rejection {
    /// A rejection with one finding.
    pub fn one(code: &str, message: &str) -> Self {
        Self {
            findings: vec![Finding {
                code: code.into(),
                message: message.into(),
            }],
        }
    }

    /// The findings as the bullet list a repair prompt carries (`- code: message` lines).
    pub fn bullets(&self) -> String {
        let lines: Vec<String> = self
            .findings
            .iter()
            .map(|f| format!("- {}: {}", f.code, f.message))
            .collect();
        lines.join("\n")
    }

    /// The check codes, in order.
    pub fn codes(&self) -> Vec<String> {
        self.findings.iter().map(|f| f.code.clone()).collect()
    }

    /// The messages, in order.
    pub fn messages(&self) -> Vec<String> {
        self.findings.iter().map(|f| f.message.clone()).collect()
    }
}

/// Why a designer attempt was rejected, or that it was accepted: one cause per attempt, the
/// first that applies in this order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// `spade check` accepted it.
    Valid,
    /// Rejected, and the completion used its whole token budget (cut at the cap).
    Cut,
    /// The reply had no code block.
    NoCode,
    /// The module did not parse (its load failed with a syntax, indentation or tab error).
    Syntax,
    /// The module defines no class whose name ends in `Env`.
    NoEnvClass,
    /// Rejected by a probe: its check code (the first error finding).
    Check(String),
}

impl Cause {
    /// The cause's name in reports: `valid`, `cut`, `no_code`, `syntax`, `no_env_class`, or
    /// the probe's check code.
    pub fn label(&self) -> String {
        match self {
            Cause::Valid => "valid".into(),
            Cause::Cut => "cut".into(),
            Cause::NoCode => "no_code".into(),
            Cause::Syntax => "syntax".into(),
            Cause::NoEnvClass => "no_env_class".into(),
            Cause::Check(code) => code.clone(),
        }
    }
}

/// Whether `source` defines a class whose name ends in `Env` (a `class NameEnv` line).
pub fn defines_env_class(source: &str) -> bool {
    source.lines().any(|l| {
        l.trim_start()
            .strip_prefix("class ")
            .map(|rest| {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                name.ends_with("Env")
            })
            .unwrap_or(false)
    })
}

/// The cause of an attempt: `code` is its extracted code block (`None`: none), `tokens` the
/// completion's length against the `max_new_tokens` cap, `verdict` the check's answer.
pub fn classify(
    code: Option<&str>,
    tokens: usize,
    max_new_tokens: usize,
    verdict: &std::result::Result<(), &Rejection>,
) -> Cause {
    let rejection = match verdict {
        Ok(()) => return Cause::Valid,
        Err(r) => r,
    };
    if tokens >= max_new_tokens {
        return Cause::Cut;
    }
    let Some(code) = code else {
        return Cause::NoCode;
    };
    let load = rejection
        .findings
        .iter()
        .find(|f| f.code == "load_failed")
        .map(|f| f.message.as_str());
    if let Some(msg) = load {
        let msg = msg.to_lowercase();
        if [
            "syntaxerror",
            "syntax error",
            "indentationerror",
            "taberror",
        ]
        .iter()
        .any(|e| msg.contains(e))
        {
            return Cause::Syntax;
        }
        if !defines_env_class(code) {
            return Cause::NoEnvClass;
        }
    }
    match rejection.findings.first() {
        Some(f) => Cause::Check(f.code.clone()),
        None => Cause::Check("rejected".into()),
    }
}

/// The normalised tokens of Python source: comments dropped (`#` to the end of the line,
/// outside string quotes), then maximal runs of letters, digits and `_`, and every other
/// non-space character alone, lower-cased. Layout and comments do not count; names do.
pub fn code_tokens(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in source.lines() {
        let mut quote: Option<char> = None;
        let mut word = String::new();
        let mut prev = '\0';
        for c in line.chars() {
            if quote.is_none() && c == '#' {
                break;
            }
            match quote {
                Some(q) if c == q && prev != '\\' => quote = None,
                None if c == '"' || c == '\'' => quote = Some(c),
                _ => {}
            }
            if c.is_alphanumeric() || c == '_' {
                word.extend(c.to_lowercase());
            } else {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                if !c.is_whitespace() {
                    out.push(c.to_string());
                }
            }
            prev = c;
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out
}

/// The set of `n`-grams of `tokens` (one gram of all of them when there are fewer than `n`).
fn ngrams(tokens: &[String], n: usize) -> BTreeSet<&[String]> {
    if tokens.len() < n {
        return std::iter::once(tokens).filter(|t| !t.is_empty()).collect();
    }
    tokens.windows(n).collect()
}

/// Jaccard similarity of the token `n`-gram sets of two sources, |A ∩ B| / |A ∪ B| over
/// [`code_tokens`]: 1 for the same code up to layout, comments and case, 0 for nothing shared
/// (and 0 when both are empty).
pub fn ngram_jaccard(a: &str, b: &str, n: usize) -> f64 {
    let (ta, tb) = (code_tokens(a), code_tokens(b));
    let (ga, gb) = (ngrams(&ta, n.max(1)), ngrams(&tb, n.max(1)));
    let union = ga.union(&gb).count();
    if union == 0 {
        return 0.0;
    }
    ga.intersection(&gb).count() as f64 / union as f64
}

/// Whether `source` is novel: its [`NOVELTY_NGRAM`]-gram Jaccard similarity to every
/// reference is below `threshold`.
pub fn is_novel(source: &str, references: &[&str], threshold: f64) -> bool {
    references
        .iter()
        .all(|r| ngram_jaccard(source, r, NOVELTY_NGRAM) < threshold)
}

/// How a designer prompt and its completion share the model's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DesignBudget {
    /// Tokens of the corpus document kept (its first ones).
    pub doc_tokens: usize,
    /// The completion's token budget.
    pub max_new_tokens: usize,
}

/// The design budget up to the model's context: the completion gets `want` tokens, or all
/// the context left after the prompt without its document (`fixed` tokens); the document
/// (`doc` tokens) keeps what is left after both, so prompt and output always fit in `ctx`.
/// An error when the prompt without its document leaves no room for a completion.
pub fn design_budget(
    ctx: usize,
    fixed: usize,
    doc: usize,
    want: usize,
) -> std::result::Result<DesignBudget, String> {
    if fixed >= ctx {
        return Err(format!(
            "the designer prompt without its document is {fixed} tokens, and the model's \
             context is {ctx}: no room for a completion (shorten the examples or turn \
             designer_example_env off)"
        ));
    }
    let max_new_tokens = want.clamp(1, ctx - fixed);
    Ok(DesignBudget {
        doc_tokens: doc.min(ctx - fixed - max_new_tokens),
        max_new_tokens,
    })
}

/// What one designer prompt came to, over all its draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignOutcome {
    /// The cause of the first draw's first attempt.
    pub first_cause: Cause,
    /// Draws made (1 + redraws used).
    pub draws: usize,
    /// The accepted source, if a draw validated (within its repairs).
    pub source: Option<String>,
    /// The environments shown in the prompt of the draw that validated (memory examples and
    /// the example environment), for the novelty measure.
    pub shown: Vec<String>,
}

/// A count out of a total, with its rate and 95% Wilson interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    /// How many.
    pub count: usize,
    /// Out of.
    pub total: usize,
    /// `count / total` (0 when the total is 0).
    pub rate: f64,
    /// Wilson interval, low end.
    pub ci_low: f64,
    /// Wilson interval, high end.
    pub ci_high: f64,
}

impl Rate {
    /// `count` of `total` with its interval.
    pub fn of(count: usize, total: usize) -> Self {
        let (ci_low, ci_high) = wilson(count, total);
        Self {
            count,
            total,
            rate: if total == 0 {
                0.0
            } else {
                count as f64 / total as f64
            },
            ci_low,
            ci_high,
        }
    }
}

/// The designer's measurement over a set of prompts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesignerReport {
    /// Designer prompts.
    pub prompts: usize,
    /// Valid at the first attempt of the first draw, of all prompts.
    pub first_attempt: Rate,
    /// Valid within the redraw and repair budget, of all prompts.
    pub within_budget: Rate,
    /// Causes of the first attempts that failed, each of all prompts, by [`Cause::label`].
    pub failures: BTreeMap<String, Rate>,
    /// Novel designs, of the valid ones.
    pub novel: Rate,
    /// The novelty threshold used.
    pub novelty_threshold: f64,
    /// Draws made in all (prompts plus redraws).
    pub draws: usize,
}

/// The report over `outcomes`: a valid design is novel when it is not a near-copy
/// ([`is_novel`] at `threshold`) of any environment its prompt showed or of `references`.
pub fn report(outcomes: &[DesignOutcome], references: &[String], threshold: f64) -> DesignerReport {
    let n = outcomes.len();
    let first = outcomes
        .iter()
        .filter(|o| o.first_cause == Cause::Valid)
        .count();
    let valid: Vec<&DesignOutcome> = outcomes.iter().filter(|o| o.source.is_some()).collect();
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.first_cause != Cause::Valid) {
        *causes.entry(o.first_cause.label()).or_default() += 1;
    }
    let novel = valid
        .iter()
        .filter(|o| {
            let src = o.source.as_deref().unwrap_or_default();
            let refs: Vec<&str> = o
                .shown
                .iter()
                .chain(references)
                .map(String::as_str)
                .collect();
            is_novel(src, &refs, threshold)
        })
        .count();
    DesignerReport {
        prompts: n,
        first_attempt: Rate::of(first, n),
        within_budget: Rate::of(valid.len(), n),
        failures: causes
            .into_iter()
            .map(|(k, c)| (k, Rate::of(c, n)))
            .collect(),
        novel: Rate::of(novel, valid.len()),
        novelty_threshold: threshold,
        draws: outcomes.iter().map(|o| o.draws).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rej(code: &str, msg: &str) -> Rejection {
        Rejection::one(code, msg)
    }

    #[test]
    fn causes_follow_their_order() {
        let ok: std::result::Result<(), &Rejection> = Ok(());
        assert_eq!(classify(Some("x"), 5000, 10, &ok), Cause::Valid);
        let r = rej("load_failed", "SyntaxError: invalid syntax");
        assert_eq!(classify(Some("x"), 10, 10, &Err(&r)), Cause::Cut);
        let nc = rej("no_code", "no block");
        assert_eq!(classify(None, 9, 10, &Err(&nc)), Cause::NoCode);
        assert_eq!(
            classify(Some("class AEnv:\n"), 9, 10, &Err(&r)),
            Cause::Syntax
        );
        let load = rej("load_failed", "ValueError: no class");
        assert_eq!(
            classify(Some("class Game:\n"), 9, 10, &Err(&load)),
            Cause::NoEnvClass
        );
        let probe = Rejection {
            findings: vec![
                Finding {
                    code: "reward".into(),
                    message: "out of range".into(),
                },
                Finding {
                    code: "step_failed".into(),
                    message: "x".into(),
                },
            ],
        };
        assert_eq!(
            classify(Some("class GameEnv:\n"), 9, 10, &Err(&probe)),
            Cause::Check("reward".into())
        );
        assert_eq!(probe.bullets(), "- reward: out of range\n- step_failed: x");
    }

    #[test]
    fn the_design_budget_fills_the_context_and_trims_the_document() {
        // 8,192 context, 1,000 fixed, 16,384 wanted: the output gets the 7,192 left and the
        // document nothing.
        let b = design_budget(8192, 1000, 500, 16_384).unwrap();
        assert_eq!((b.max_new_tokens, b.doc_tokens), (7192, 0));
        // 4,096 wanted: 3,096 remain, the 500-token document fits whole.
        let b = design_budget(8192, 1000, 500, 4096).unwrap();
        assert_eq!((b.max_new_tokens, b.doc_tokens), (4096, 500));
        // 7,000 wanted: 192 remain, the document is cut to them.
        let b = design_budget(8192, 1000, 500, 7000).unwrap();
        assert_eq!((b.max_new_tokens, b.doc_tokens), (7000, 192));
        assert!(b.max_new_tokens + b.doc_tokens + 1000 <= 8192);
        let err = design_budget(2048, 2048, 10, 100).unwrap_err();
        assert!(
            err.contains("2048 tokens") && err.contains("no room"),
            "{err}"
        );
    }

    #[test]
    fn tokens_drop_comments_and_layout_and_keep_strings() {
        assert_eq!(
            code_tokens("x = a+1  # note\ns = '#no'\n"),
            vec!["x", "=", "a", "+", "1", "s", "=", "'", "#", "no", "'"]
        );
        assert_eq!(code_tokens("Foo_Bar(2)"), vec!["foo_bar", "(", "2", ")"]);
    }

    #[test]
    fn jaccard_on_hand_written_pairs() {
        // Same code up to layout, comments and case: 1.
        assert_eq!(
            ngram_jaccard("a = b + c + d\n", "A=b+c+d  # same\n", 5),
            1.0
        );
        // "a = b + c" (5 tokens, one gram) against "a = b + c + d" (7 tokens, 3 grams
        // "a=b+c", "=b+c+", "b+c+d"): 1 shared of 3 in the union.
        assert!((ngram_jaccard("a = b + c", "a = b + c + d", 5) - 1.0 / 3.0).abs() < 1e-12);
        // Nothing shared.
        assert_eq!(ngram_jaccard("x = 1", "y = 2", 5), 0.0);
        assert_eq!(ngram_jaccard("", "", 5), 0.0);
        // Grams "p q r s t", "q r s t u" against "p q r s t", "q r s t v": 1 / 3 < 0.5, novel;
        // against itself it is a copy.
        assert!(is_novel("p q r s t u", &["p q r s t v"], 0.5));
        assert!(!is_novel("p q r s t u", &["z", "p q r s t u"], 0.5));
        assert!(is_novel("p q r s t u", &[], 0.5));
    }
}
