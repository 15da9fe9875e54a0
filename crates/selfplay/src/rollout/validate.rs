//! Phase 2, validate and repair: each design's code, after the automatic fixes (`auto_fix`),
//! is checked (`spade check` under the validation fuel budget, its solution required to win:
//! [`admission`]); a rejected one gets up to `max_repair_attempts` repair prompts with
//! the errors fed back. Accepted designs join the pool with a design record on disk.
use std::time::Instant;

use spade_envtools::check::check;
use spade_envtools::oracles::Severity;
use spade_model::chat::Message;

use super::design::Designed;
use super::{Metrics, Run, io_err};
use crate::admission;
use crate::error::{Result, TrainError};
use crate::extract;
use crate::policy::{Role, Sampled};
use crate::prompts;
use crate::state::PoolEnv;

/// A check verdict: the class name and tool-use flag, or the errors as a bullet list.
pub(super) type Verdict = std::result::Result<(String, bool), String>;

/// One designer completion after validation.
#[derive(Debug, Clone)]
pub(super) struct DesignResult {
    /// The skill its prompt asked for.
    pub skill: String,
    /// The first-attempt completion.
    pub first: Sampled,
    /// Repair completions, in order.
    pub repairs: Vec<Sampled>,
    /// Pool index of the environment it produced, if one validated.
    pub env: Option<usize>,
}

/// A designer completion while it is validated and repaired.
struct Pending {
    /// Designer prompt index.
    d: usize,
    /// Completion index within the prompt.
    g: usize,
    /// The code of the latest attempt, if it had a code block.
    code: Option<String>,
    /// The design record's attempts so far.
    log: Vec<serde_json::Value>,
    first: Sampled,
    repairs: Vec<Sampled>,
    /// `Some(verdict)` once done: the accepted class name and tool-use flag, or `None`.
    outcome: Option<Option<(String, bool)>>,
}

impl Run<'_> {
    /// `spade check` of `source` under the run's validation settings (cached per source).
    async fn verdict(&mut self, source: &str) -> Verdict {
        if let Some(v) = self.verdicts.get(source) {
            return v.clone();
        }
        let opts = admission::check_options(&self.cfg.admission());
        let report = check(&self.runtime, source, &opts).await;
        let v = if report.accepted {
            Ok((report.class_name.unwrap_or_default(), report.tool_use))
        } else {
            let errors: Vec<String> = report
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .map(|f| format!("- {}: {}", f.code, f.message))
                .collect();
            Err(errors.join("\n"))
        };
        self.verdicts.insert(source.to_string(), v.clone());
        v
    }

    /// Validates (and repairs) every completion of every designer prompt. Repairs go in
    /// rounds: every design still rejected after attempt `k` gets its attempt `k + 1` in one
    /// batch (each seeded as if sampled alone), so repairing several designs costs about as
    /// long as repairing one.
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
                    code: extract::python_block(&first.text),
                    log: vec![serde_json::json!({"completion": first.text})],
                    first: first.clone(),
                    repairs: Vec::new(),
                    outcome: None,
                });
            }
        }
        loop {
            let mut to_repair = Vec::new();
            for (i, p) in pending.iter_mut().enumerate() {
                if p.outcome.is_some() {
                    continue;
                }
                if let Some(fixes) = admission::auto_fix(self.cfg.auto_fix, &mut p.code) {
                    p.log.push(fixes);
                }
                let errors = match self.validate_code(r, p.g, p.code.as_deref(), m).await {
                    Ok(v) => {
                        p.outcome = Some(Some(v));
                        continue;
                    }
                    Err(errors) => errors,
                };
                p.log.push(serde_json::json!({"errors": errors}));
                if p.repairs.len() >= self.cfg.max_repair_attempts {
                    p.outcome = Some(None);
                } else {
                    to_repair.push((i, errors));
                }
            }
            if to_repair.is_empty() {
                break;
            }
            self.repair_round(r, &mut pending, &to_repair, m)?;
        }
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            let mut env = None;
            if let (Some(Some((class_name, tool_use))), Some(source)) = (p.outcome, p.code) {
                m.valid += 1;
                if !p.repairs.is_empty() {
                    m.repaired += 1;
                }
                let prompt = &designed[p.d];
                env = Some(self.add_designed(r, prompt, p.log, source, class_name, tool_use)?);
            }
            out.push(DesignResult {
                skill: designed[p.d].spec.skill.clone(),
                first: p.first,
                repairs: p.repairs,
                env,
            });
        }
        if m.designs > 0 {
            m.validity_rate = m.valid as f64 / m.designs as f64;
            m.repair_rate = m.repaired as f64 / m.designs as f64;
        }
        Ok(out)
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
            None => Err("- no_code: the reply has no ```python code block".into()),
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
            let parts = [r, p.d as u64, p.g as u64, (p.repairs.len() + 1) as u64];
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

    /// Adds an accepted design to the pool and writes its design record; returns its index.
    fn add_designed(
        &mut self,
        r: u64,
        prompt: &Designed,
        log: Vec<serde_json::Value>,
        source: String,
        class_name: String,
        tool_use: bool,
    ) -> Result<usize> {
        let id = format!("env{:05}", self.state.next_env);
        self.state.next_env += 1;
        let design_file = format!("designs/{id}.json");
        let record = serde_json::json!({
            "spec": prompt.spec, "prompt": prompt.prompt, "attempts": log,
        });
        let path = self.dir.join(&design_file);
        std::fs::create_dir_all(path.parent().expect("designs/"))
            .map_err(io_err("creating", &path))?;
        let text = serde_json::to_string_pretty(&record).expect("a design record serialises");
        std::fs::write(&path, text).map_err(io_err("writing", &path))?;
        let spec = &prompt.spec;
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
