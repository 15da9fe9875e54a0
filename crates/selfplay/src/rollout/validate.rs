//! Phase 2, validate, repair and redraw: each design's code, after the automatic fixes
//! (`auto_fix`), is checked (`spade check` under the validation fuel budget, its solution
//! required to win: [`admission`], in [`Run::verdict`], the one place a design source is
//! checked); a rejected one gets up to `max_repair_attempts` repair prompts with the errors
//! fed back, and one still rejected is redrawn from scratch with a fresh corpus document, up
//! to `design_redraws` times. Accepted designs join the pool with a design record in
//! `designs/`; every draw that failed leaves a record with its check codes in `rejected/`.
use std::time::Instant;

use spade_envtools::check::check;
use spade_envtools::oracles::Severity;
use spade_model::chat::Message;

use super::design::Designed;
use super::{Metrics, Run, io_err};
use crate::admission;
use crate::designer::{Cause, DesignOutcome, Finding, Rejection, classify};
use crate::error::{Result, TrainError};
use crate::extract;
use crate::memory::DesignerExamples;
use crate::policy::{Role, Sampled};
use crate::prompts::{self, DesignSpec};
use crate::state::PoolEnv;

/// A check verdict: the class name and tool-use flag, or the error findings.
pub(super) type Verdict = std::result::Result<(String, bool), Rejection>;

/// One designer completion after validation.
#[derive(Debug, Clone)]
pub(super) struct DesignResult {
    /// The skill its prompt asked for.
    pub skill: String,
    /// The trained first attempt: the validating draw's, or the first draw's when none
    /// validated.
    pub first: Sampled,
    /// That draw's repair completions, in order.
    pub repairs: Vec<Sampled>,
    /// Pool index of the environment it produced, if one validated.
    pub env: Option<usize>,
    /// What the design came to over its draws (for `spade eval --designer`).
    pub outcome: DesignOutcome,
}

/// One draw of a designer completion while it is validated and repaired.
struct Pending {
    /// Designer prompt index.
    d: usize,
    /// Completion index within the prompt.
    g: usize,
    /// Draw number (0: the design phase's own completion).
    draw: usize,
    /// What this draw's prompt asked for (its document id included).
    spec: DesignSpec,
    /// This draw's user message.
    prompt: String,
    /// Document ids of this design's draws so far.
    docs: Vec<usize>,
    /// This draw's completion budget in tokens.
    max_new: usize,
    /// The code of the latest attempt, if it had a code block.
    code: Option<String>,
    /// The design record's attempts so far.
    log: Vec<serde_json::Value>,
    /// This draw's first attempt.
    first: Sampled,
    /// The first draw's first attempt (trained when no draw validates).
    first_draw: Sampled,
    repairs: Vec<Sampled>,
    /// The latest rejection.
    rejection: Rejection,
    /// The cause of the first draw's first attempt, once checked.
    first_cause: Option<Cause>,
    /// `Some(verdict)` once this draw is done: the accepted class name and tool-use flag, or
    /// `None`.
    outcome: Option<Option<(String, bool)>>,
    /// Whether this draw's `rejected/` record is written.
    recorded: bool,
}

impl Run<'_> {
    /// `spade check` of `source` under the run's validation settings (cached per source):
    /// the one place a design source is checked, in training and in `spade eval --designer`.
    async fn verdict(&mut self, source: &str) -> Verdict {
        if let Some(v) = self.verdicts.get(source) {
            return v.clone();
        }
        let opts = admission::check_options(&self.cfg.admission());
        let report = check(&self.runtime, source, &opts).await;
        let v = if report.accepted {
            Ok((report.class_name.unwrap_or_default(), report.tool_use))
        } else {
            Err(Rejection {
                findings: report
                    .findings
                    .iter()
                    .filter(|f| f.severity == Severity::Error)
                    .map(|f| Finding {
                        code: f.code.to_string(),
                        message: f.message.clone(),
                    })
                    .collect(),
            })
        };
        self.verdicts.insert(source.to_string(), v.clone());
        v
    }

    /// Validates (repairs and redraws) every completion of every designer prompt. Repairs go
    /// in rounds: every draw still rejected after attempt `k` gets its attempt `k + 1` in one
    /// batch (each seeded as if sampled alone), so repairing several designs costs about as
    /// long as repairing one; redraws go in rounds the same way once the repairs are spent.
    pub(super) async fn validate_designs(
        &mut self,
        r: u64,
        designed: Vec<Designed>,
        m: &mut Metrics,
    ) -> Result<Vec<DesignResult>> {
        let mut pending: Vec<Pending> = Vec::new();
        for (d, prompt) in designed.iter().enumerate() {
            for (g, first) in prompt.completions.iter().enumerate() {
                pending.push(Pending {
                    d,
                    g,
                    draw: 0,
                    spec: prompt.spec.clone(),
                    prompt: prompt.prompt.clone(),
                    docs: vec![prompt.spec.doc_id],
                    max_new: prompt.max_new,
                    code: extract::python_block(&first.text),
                    log: vec![serde_json::json!({"completion": first.text})],
                    first: first.clone(),
                    first_draw: first.clone(),
                    repairs: Vec::new(),
                    rejection: Rejection::default(),
                    first_cause: None,
                    outcome: None,
                    recorded: false,
                });
            }
        }
        loop {
            self.repair_draws(r, &mut pending, m).await?;
            let failed: Vec<usize> = (0..pending.len())
                .filter(|&i| matches!(pending[i].outcome, Some(None)) && !pending[i].recorded)
                .collect();
            for &i in &failed {
                self.write_rejected(r, &pending[i])?;
                pending[i].recorded = true;
            }
            let redraw: Vec<usize> = failed
                .into_iter()
                .filter(|&i| pending[i].draw < self.cfg.design_redraws)
                .collect();
            if redraw.is_empty() {
                break;
            }
            self.redraw_round(r, &designed, &mut pending, &redraw, m)?;
        }
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            let prompt = &designed[p.d];
            let mut shown: Vec<String> = prompt
                .examples
                .positive
                .iter()
                .map(|e| e.code.clone())
                .collect();
            shown.extend(self.cfg.designer_example_source());
            let mut outcome = DesignOutcome {
                first_cause: p.first_cause.clone().unwrap_or(Cause::NoCode),
                draws: p.draw + 1,
                source: None,
                shown,
            };
            let (first, repairs, env) = match (p.outcome, p.code) {
                (Some(Some((class_name, tool_use))), Some(source)) => {
                    m.valid += 1;
                    if !p.repairs.is_empty() {
                        m.repaired += 1;
                    }
                    outcome.source = Some(source.clone());
                    let record = serde_json::json!({
                        "spec": p.spec, "prompt": p.prompt, "draw": p.draw,
                        "attempts": p.log,
                    });
                    let env =
                        self.add_designed(r, &p.spec, record, source, class_name, tool_use)?;
                    (p.first, p.repairs, Some(env))
                }
                _ => (p.first_draw, Vec::new(), None),
            };
            out.push(DesignResult {
                skill: prompt.spec.skill.clone(),
                first,
                repairs,
                env,
                outcome,
            });
        }
        if m.designs > 0 {
            m.validity_rate = m.valid as f64 / m.designs as f64;
            m.repair_rate = m.repaired as f64 / m.designs as f64;
        }
        Ok(out)
    }

    /// Checks every draw still open and repairs the rejected ones in rounds until each is
    /// accepted or out of repairs.
    async fn repair_draws(
        &mut self,
        r: u64,
        pending: &mut [Pending],
        m: &mut Metrics,
    ) -> Result<()> {
        loop {
            let mut to_repair = Vec::new();
            for (i, p) in pending.iter_mut().enumerate() {
                if p.outcome.is_some() {
                    continue;
                }
                if let Some(fixes) = admission::auto_fix(self.cfg.auto_fix, &mut p.code) {
                    p.log.push(fixes);
                }
                let verdict = self.validate_code(r, p.g, p.code.as_deref(), m).await;
                if p.draw == 0 && p.repairs.is_empty() {
                    let ok = verdict.as_ref().map(|_| ());
                    p.first_cause = Some(classify(
                        p.code.as_deref(),
                        p.first.tokens.len(),
                        p.max_new,
                        &ok,
                    ));
                }
                let rejection = match verdict {
                    Ok(v) => {
                        p.outcome = Some(Some(v));
                        continue;
                    }
                    Err(rejection) => rejection,
                };
                let errors = rejection.bullets();
                p.log.push(serde_json::json!({"errors": errors}));
                p.rejection = rejection;
                if p.repairs.len() >= self.cfg.max_repair_attempts {
                    p.outcome = Some(None);
                } else {
                    to_repair.push((i, errors));
                }
            }
            if to_repair.is_empty() {
                return Ok(());
            }
            self.repair_round(r, pending, &to_repair, m)?;
        }
    }

    /// Redraws each pending draw in `redraw` from scratch: the same skill, difficulty,
    /// variant and examples with a document the design has not used, all sampled as one
    /// batch, each seeded by the run seed, the rollout, the design and the draw number.
    fn redraw_round(
        &mut self,
        r: u64,
        designed: &[Designed],
        pending: &mut [Pending],
        redraw: &[usize],
        m: &mut Metrics,
    ) -> Result<()> {
        let mut max_new = self.cfg.designer_max_new_tokens;
        let mut chats = Vec::with_capacity(redraw.len());
        let mut seeds = Vec::with_capacity(redraw.len());
        let mut specs = Vec::with_capacity(redraw.len());
        for &i in redraw {
            let p = &pending[i];
            let parts = [r, p.d as u64, p.g as u64, (p.draw + 1) as u64];
            let doc = self
                .corpus
                .sample_fresh(self.seed("redraw-doc", &parts), &p.docs)
                .clone();
            let spec = DesignSpec {
                doc_id: doc.id,
                ..p.spec.clone()
            };
            let examples: &DesignerExamples = &designed[p.d].examples;
            // One batch, one budget: the smallest, so that every prompt fits with it.
            let (prompt, budget) = self.fit_design(&spec, &doc.text, examples)?;
            max_new = max_new.min(budget);
            chats.push([
                Message::new("system", prompts::DESIGNER_SYSTEM),
                Message::new("user", prompt.clone()),
            ]);
            seeds.push(self.seed("redraw", &parts));
            specs.push((spec, prompt));
        }
        let chats: Vec<&[Message]> = chats.iter().map(|c| c.as_slice()).collect();
        let ts = Instant::now();
        let label = format!("redraw {} designs", redraw.len());
        self.start_sampling(r, &label, redraw.len() * max_new);
        let drawn = self
            .policy
            .sample_each(Role::Designer, &chats, max_new, &seeds);
        self.end_phase();
        m.time.design += ts.elapsed().as_secs_f64();
        let drawn = drawn?;
        if drawn.len() != redraw.len() {
            return Err(TrainError::Policy(format!(
                "the policy returned {} redraws for {} designs",
                drawn.len(),
                redraw.len()
            )));
        }
        for ((&i, (spec, prompt)), s) in redraw.iter().zip(specs).zip(drawn) {
            let p = &mut pending[i];
            m.redraws += 1;
            m.tokens_sampled += s.tokens.len();
            p.draw += 1;
            p.docs.push(spec.doc_id);
            p.max_new = max_new;
            p.spec = spec;
            p.prompt = prompt;
            p.code = extract::python_block(&s.text);
            p.log = vec![serde_json::json!({"completion": s.text})];
            p.first = s;
            p.repairs.clear();
            p.rejection = Rejection::default();
            p.outcome = None;
            p.recorded = false;
        }
        Ok(())
    }

    /// Writes the `rejected/` record of a draw that failed: its prompt, spec, document,
    /// completion, attempts, and the check codes and messages of its last attempt.
    fn write_rejected(&self, r: u64, p: &Pending) -> Result<()> {
        let (last, cap) = match p.repairs.last() {
            Some(fix) => (fix, self.cfg.designer_max_new_tokens),
            None => (&p.first, p.max_new),
        };
        let cause = classify(
            p.code.as_deref(),
            last.tokens.len(),
            cap,
            &Err(&p.rejection),
        );
        let record = serde_json::json!({
            "rollout": r, "design": p.d, "completion_index": p.g, "draw": p.draw,
            "spec": p.spec, "doc_id": p.spec.doc_id, "prompt": p.prompt,
            "completion": p.first.text, "attempts": p.log, "cause": cause.label(),
            "codes": p.rejection.codes(), "messages": p.rejection.messages(),
        });
        let name = format!("r{r:05}-p{:03}-c{:02}-draw{}.json", p.d, p.g, p.draw);
        self.write_record("rejected", &name, &record)
    }

    /// Writes `record` as `dir/name` under the run directory.
    fn write_record(&self, dir: &str, name: &str, record: &serde_json::Value) -> Result<()> {
        let folder = self.dir.join(dir);
        std::fs::create_dir_all(&folder).map_err(io_err("creating", &folder))?;
        let path = folder.join(name);
        let text = serde_json::to_string_pretty(record).unwrap_or_else(|_| record.to_string());
        std::fs::write(&path, text).map_err(io_err("writing", &path))
    }

    /// The check verdict of completion `g`'s code (`None`: the reply had no code block).
    async fn validate_code(
        &mut self,
        r: u64,
        g: usize,
        code: Option<&str>,
        m: &mut Metrics,
    ) -> Verdict {
        let tv = Instant::now();
        self.progress
            .start(r, &format!("validate design {}", g + 1), 1, "checks");
        let verdict = match code {
            Some(c) => self.verdict(c).await,
            None => Err(Rejection::one(
                "no_code",
                "the reply has no ```python code block",
            )),
        };
        self.progress.advance(1);
        self.progress.finish();
        m.time.validate += tv.elapsed().as_secs_f64();
        verdict
    }

    /// Samples the next repair of each `(pending index, errors)` in `to_repair`, as one batch.
    fn repair_round(
        &mut self,
        r: u64,
        pending: &mut [Pending],
        to_repair: &[(usize, String)],
        m: &mut Metrics,
    ) -> Result<()> {
        let max_new = self.cfg.designer_max_new_tokens;
        let attempt = pending[to_repair[0].0].repairs.len() + 1;
        let mut chats = Vec::with_capacity(to_repair.len());
        let mut seeds = Vec::with_capacity(to_repair.len());
        for (i, errors) in to_repair {
            let p = &pending[*i];
            let prev = p.code.clone().unwrap_or_else(|| p.first.text.clone());
            chats.push([
                Message::new("system", prompts::DESIGNER_SYSTEM),
                Message::new("user", prompts::repair_prompt(&prev, errors)),
            ]);
            let mut parts = vec![r, p.d as u64, p.g as u64, (p.repairs.len() + 1) as u64];
            if p.draw > 0 {
                parts.push(p.draw as u64);
            }
            seeds.push(self.seed("repair", &parts));
            m.repair_attempts += 1;
        }
        let chats: Vec<&[Message]> = chats.iter().map(|c| c.as_slice()).collect();
        let ts = Instant::now();
        let label = match to_repair {
            [(i, _)] => format!("repair design {} (attempt {attempt})", pending[*i].g + 1),
            _ => format!("repair {} designs (attempt {attempt})", to_repair.len()),
        };
        self.start_sampling(r, &label, to_repair.len() * max_new);
        let fixes = self
            .policy
            .sample_each(Role::Repair, &chats, max_new, &seeds);
        self.end_phase();
        m.time.design += ts.elapsed().as_secs_f64();
        let fixes = fixes?;
        if fixes.len() != to_repair.len() {
            return Err(TrainError::Policy(format!(
                "the policy returned {} repairs for {} designs",
                fixes.len(),
                to_repair.len()
            )));
        }
        for ((i, _), fix) in to_repair.iter().zip(fixes) {
            let p = &mut pending[*i];
            m.tokens_sampled += fix.tokens.len();
            p.log.push(serde_json::json!({"repair": fix.text}));
            p.code = extract::python_block(&fix.text);
            p.repairs.push(fix);
        }
        Ok(())
    }

    /// Adds an accepted design to the pool and writes its design `record`; returns its index.
    fn add_designed(
        &mut self,
        r: u64,
        spec: &DesignSpec,
        record: serde_json::Value,
        source: String,
        class_name: String,
        tool_use: bool,
    ) -> Result<usize> {
        let id = format!("env{:05}", self.state.next_env);
        self.state.next_env += 1;
        self.write_record("designs", &format!("{id}.json"), &record)?;
        let design_file = format!("designs/{id}.json");
        self.state.pool.push(PoolEnv {
            id,
            source,
            class_name,
            skill: spec.skill.clone(),
            difficulty: spec.difficulty.clone(),
            variant: Some(spec.variant),
            doc_id: Some(spec.doc_id),
            tool_use,
            hint: None,
            created: r,
            origin: "designed".into(),
            design_file: Some(design_file),
            banned: false,
        });
        Ok(self.state.pool.len() - 1)
    }
}
