//! The greedy-agreement table of `spade bench-model`: for a written set of prompts (a plain
//! question and the design, hint and play prompts self-play sends), each decode-weights variant
//! decodes greedily, and the table gives how many tokens equal the first variant's (the
//! training path's, `f32`, by default) before the first difference, the text up to there, and
//! the |Δ log-prob| per token over the tokens both decoded alike.
use spade_model::chat::Message;
use spade_model::load::LoadedModel;
use spade_model::sample::{Sampler, SamplingParams};
use spade_selfplay::corpus::{Corpus, DEFAULT_CORPUS};
use spade_selfplay::memory::DesignerExamples;
use spade_selfplay::prompts::{self, DesignSpec, Variant};
use spade_selfplay::starter_envs::starter_envs;

use super::variant::DecodeVariant;

/// One prompt of the set: a name and its chat messages.
pub struct AgreementPrompt {
    pub name: &'static str,
    pub messages: Vec<Message>,
}

/// The written prompt set: a plain question, the designer's prompt on the bundled corpus's
/// first document, the hint prompt of the first starter environment, and the agent's prompt on
/// a fixed single-answer task.
pub fn prompt_set() -> anyhow::Result<Vec<AgreementPrompt>> {
    let corpus = Corpus::parse(DEFAULT_CORPUS, 200)?;
    let document = corpus
        .docs()
        .first()
        .ok_or_else(|| anyhow::anyhow!("the bundled corpus is empty"))?;
    let spec = DesignSpec {
        skill: prompts::SKILLS[0].to_string(),
        difficulty: prompts::DIFFICULTIES[0].to_string(),
        variant: Variant::SingleAnswer,
        doc_id: 0,
    };
    let starter = starter_envs()
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no starter environment is bundled"))?;
    Ok(vec![
        AgreementPrompt {
            name: "question",
            messages: vec![Message::new("user", "What is the capital of France?")],
        },
        AgreementPrompt {
            name: "design",
            messages: vec![
                Message::new("system", prompts::DESIGNER_SYSTEM),
                Message::new(
                    "user",
                    prompts::designer_prompt(&spec, &document.text, &DesignerExamples::default()),
                ),
            ],
        },
        AgreementPrompt {
            name: "hint",
            messages: vec![Message::new(
                "user",
                prompts::hint_prompt(&starter.1, false),
            )],
        },
        AgreementPrompt {
            name: "play",
            messages: vec![
                Message::new("system", prompts::agent_system(false)),
                Message::new(
                    "user",
                    "A shop sells pencils at 17 cents each. How many cents do 23 pencils cost? \
                     Answer in \\boxed{}.",
                ),
            ],
        },
    ])
}

/// One variant's greedy completion of one prompt.
struct Greedy {
    tokens: Vec<u32>,
    /// Each token's log-probability under the variant's own forward pass.
    logprobs: Vec<f32>,
    text: String,
}

/// Decodes every prompt greedily (`tokens` new tokens) with every variant, the first being the
/// reference, and prints the table and the |Δ log-prob| percentiles per variant.
pub fn run(
    loaded: &mut LoadedModel,
    variants: &[DecodeVariant],
    tokens: usize,
) -> anyhow::Result<()> {
    let set = prompt_set()?;
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: tokens,
        seed: 0,
        ..SamplingParams::default()
    };
    // completions[v][p]: variant v's greedy completion of prompt p.
    let mut completions: Vec<Vec<Greedy>> = Vec::new();
    for &variant in variants {
        loaded
            .model
            .set_decode_weights(variant.weights, variant.activations)?;
        let sampler = Sampler::from_loaded(loaded);
        let mut row = Vec::new();
        for prompt in &set {
            let ids = sampler.encode(&loaded.chat.render(&prompt.messages, true))?;
            let c = sampler
                .sample(&ids, 1, &params, &mut |_, _| {})?
                .pop()
                .expect("one completion");
            row.push(Greedy {
                tokens: c.tokens,
                logprobs: c.logprobs,
                text: c.text,
            });
        }
        completions.push(row);
    }
    say!(
        "greedy agreement ({tokens} new tokens, vs {}): tokens equal before the first difference",
        variants[0]
    );
    say!("| prompt | variant | equal tokens | greedy text (to the first difference, then `⟂`) |");
    say!("|---|---|---|---|");
    for (p, prompt) in set.iter().enumerate() {
        let reference = &completions[0][p];
        for (v, variant) in variants.iter().enumerate() {
            let c = &completions[v][p];
            let same = common_prefix(&reference.tokens, &c.tokens);
            let shown = if v == 0 || same == c.tokens.len() {
                c.text.clone()
            } else {
                let decode = |ids: &[u32]| {
                    loaded
                        .tokenizer
                        .decode(ids, true)
                        .map_err(|e| anyhow::anyhow!("decoding tokens: {e}"))
                };
                format!(
                    "{}⟂{}",
                    decode(&c.tokens[..same])?,
                    decode(&c.tokens[same..])?
                )
            };
            say!(
                "| {} | {variant} | {same}/{} | {} |",
                prompt.name,
                c.tokens.len(),
                one_line(&shown, 120)
            );
        }
    }
    say!("| variant | prompts fully equal | abs(Δ log-prob) p50 | p99 | max | tokens compared |");
    say!("|---|---|---|---|---|---|");
    for (v, variant) in variants.iter().enumerate().skip(1) {
        let mut gaps = Vec::new();
        let mut equal = 0;
        for (reference, c) in completions[0].iter().zip(&completions[v]) {
            let same = common_prefix(&reference.tokens, &c.tokens);
            if same == reference.tokens.len() && same == c.tokens.len() {
                equal += 1;
            }
            gaps.extend(
                reference.logprobs[..same]
                    .iter()
                    .zip(&c.logprobs[..same])
                    .map(|(a, b)| (a - b).abs()),
            );
        }
        let [p50, p99, max] = percentiles(&mut gaps);
        say!(
            "| {variant} | {equal}/{} | {p50:.4} | {p99:.4} | {max:.4} | {} |",
            set.len(),
            gaps.len()
        );
    }
    Ok(())
}

/// How many leading tokens `a` and `b` share.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The 50th and 99th percentiles (nearest rank) and the maximum; zeros when empty.
fn percentiles(values: &mut [f32]) -> [f32; 3] {
    if values.is_empty() {
        return [0.0; 3];
    }
    values.sort_by(f32::total_cmp);
    let rank =
        |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    [rank(0.50), rank(0.99), values[values.len() - 1]]
}

/// `text` on one line (newlines as `⏎`), at most `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.replace('\n', "⏎").replace('|', "\\|");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_percentiles() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        let mut values: Vec<f32> = (1..=100).map(|i| i as f32).collect();
        assert_eq!(percentiles(&mut values), [50.0, 99.0, 100.0]);
        assert_eq!(percentiles(&mut [3.0, 1.0]), [1.0, 3.0, 3.0]);
        assert_eq!(percentiles(&mut []), [0.0; 3]);
    }

    #[test]
    fn the_prompt_set_is_the_four_written_prompts() {
        let set = prompt_set().unwrap();
        let names: Vec<&str> = set.iter().map(|p| p.name).collect();
        assert_eq!(names, ["question", "design", "hint", "play"]);
        assert!(set[1].messages[1].content.contains("<document>"));
        assert!(one_line("a\nb|c", 10) == "a⏎b\\|c");
    }
}
