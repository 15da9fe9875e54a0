//! Phase 2, validate and repair: each design's code is checked (`spade check` under the
//! validation fuel budget); a rejected one gets up to `max_repair_attempts` repair prompts with
//! the errors fed back. Accepted designs join the pool with a design record on disk.
use std::time::Instant;

use spade_runtime::check::{CheckOptions, check};
use spade_runtime::fuzz::oracles::Severity;

use super::design::Designed;
use super::{Metrics, Run, io_err};
use crate::chat::Message;
use crate::error::Result;
use crate::selfplay::extract;
use crate::selfplay::policy::{Role, Sampled};
use crate::selfplay::prompts;
use crate::selfplay::state::PoolEnv;

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

impl Run<'_> {
    /// `spade check` of `source` under the run's validation settings (cached per source).
    async fn verdict(&mut self, source: &str) -> Verdict {
        if let Some(v) = self.verdicts.get(source) {
            return v.clone();
        }
        let opts = CheckOptions {
            seeds: self.cfg.check_seeds,
            max_steps: self.cfg.check_max_steps,
            fuel_budget: Some(self.cfg.validation_fuel),
            ..CheckOptions::default()
        };
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

    /// Validates (and repairs) every completion of every designer prompt.
    pub(super) async fn validate_designs(
        &mut self,
        r: u64,
        designed: Vec<Designed>,
        m: &mut Metrics,
    ) -> Result<Vec<DesignResult>> {
        let mut out = Vec::new();
        for (d, prompt) in designed.into_iter().enumerate() {
            for (g, first) in prompt.completions.iter().enumerate() {
                let result = self
                    .validate_one(r, d, g, &prompt, first.clone(), m)
                    .await?;
                out.push(result);
            }
        }
        if m.designs > 0 {
            m.validity_rate = m.valid as f64 / m.designs as f64;
            m.repair_rate = m.repaired as f64 / m.designs as f64;
        }
        Ok(out)
    }

    async fn validate_one(
        &mut self,
        r: u64,
        d: usize,
        g: usize,
        prompt: &Designed,
        first: Sampled,
        m: &mut Metrics,
    ) -> Result<DesignResult> {
        let cfg = self.cfg.clone();
        let mut code = extract::python_block(&first.text);
        let mut log = vec![serde_json::json!({"completion": first.text})];
        let mut repairs = Vec::new();
        let accepted = loop {
            let tv = Instant::now();
            self.progress
                .start(r, &format!("validate design {}", g + 1), 1, "checks");
            let verdict = match &code {
                Some(c) => self.verdict(c).await,
                None => Err("- no_code: the reply has no ```python code block".into()),
            };
            self.progress.advance(1);
            self.progress.finish();
            m.time.validate += tv.elapsed().as_secs_f64();
            let errors = match verdict {
                Ok(v) => break Some(v),
                Err(errors) => errors,
            };
            log.push(serde_json::json!({"errors": errors}));
            if repairs.len() >= cfg.max_repair_attempts {
                break None;
            }
            let attempt = repairs.len() + 1;
            m.repair_attempts += 1;
            let prev = code.clone().unwrap_or_else(|| first.text.clone());
            let msgs = [
                Message::new("system", prompts::DESIGNER_SYSTEM),
                Message::new("user", prompts::repair_prompt(&prev, &errors)),
            ];
            let ts = Instant::now();
            self.start_sampling(
                r,
                &format!("repair design {} (attempt {attempt})", g + 1),
                cfg.designer_max_new_tokens,
            );
            let seed = self.seed("repair", &[r, d as u64, g as u64, attempt as u64]);
            let fix = self
                .policy
                .sample(Role::Repair, &msgs, 1, cfg.designer_max_new_tokens, seed);
            self.end_phase();
            m.time.design += ts.elapsed().as_secs_f64();
            let Some(fix) = fix?.into_iter().next() else {
                break None;
            };
            m.tokens_sampled += fix.tokens.len();
            log.push(serde_json::json!({"repair": fix.text}));
            code = extract::python_block(&fix.text);
            repairs.push(fix);
        };
        let mut env = None;
        if let (Some((class_name, tool_use)), Some(source)) = (accepted, code) {
            m.valid += 1;
            if !repairs.is_empty() {
                m.repaired += 1;
            }
            env = Some(self.add_designed(r, prompt, log, source, class_name, tool_use)?);
        }
        Ok(DesignResult {
            skill: prompt.spec.skill.clone(),
            first,
            repairs,
            env,
        })
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
