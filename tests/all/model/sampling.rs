//! Seeded sampling, groups sharing a prefilled cache, stop conditions and log-probs.
use candle_core::Device;
use spade_model::logprob::{Pair, completion_logprobs};
use spade_model::model::Decoder;
use spade_model::sample::{Completion, FinishReason, Sampler, SamplingParams};

use super::common::{tiny_llama_with_vocab, tiny_tokenizer};

fn setup() -> (Decoder, tokenizers::Tokenizer) {
    let cfg = tiny_llama_with_vocab();
    let (m, _vm) = Decoder::random(&cfg, 9, 0.3, &Device::Cpu).unwrap();
    (m, tiny_tokenizer())
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        max_new_tokens: 12,
        seed,
        ..SamplingParams::default()
    }
}

/// Each completion's sampled log-probabilities equal those the training path computes.
fn assert_logprobs_are_the_models(m: &Decoder, prompt: &[u32], completions: &[Completion]) {
    let pairs: Vec<Pair> = completions
        .iter()
        .map(|c| Pair {
            prompt,
            completion: &c.tokens,
        })
        .collect();
    let lp: Vec<f32> = completion_logprobs(m, &pairs).unwrap().to_vec1().unwrap();
    let sampled: Vec<f32> = completions
        .iter()
        .flat_map(|c| c.logprobs.iter().copied())
        .collect();
    assert_eq!(lp.len(), sampled.len());
    for (x, y) in lp.iter().zip(&sampled) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
}

#[test]
fn same_seed_same_group_and_logprobs_match_training_path() {
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let prompt = s
        .encode("<|im_start|>user\nthe winter<|im_end|>\n")
        .unwrap();
    let a = s.sample(&prompt, 4, &params(3), &mut |_, _| {}).unwrap();
    let b = s.sample(&prompt, 4, &params(3), &mut |_, _| {}).unwrap();
    let c = s.sample(&prompt, 4, &params(4), &mut |_, _| {}).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(
        a[0].tokens, a[1].tokens,
        "group members draw from different streams"
    );
    // Completion i of a group equals a lone completion with the same stream.
    let single = s.sample(&prompt, 1, &params(3), &mut |_, _| {}).unwrap();
    assert_eq!(single[0].tokens, a[0].tokens);
    assert_logprobs_are_the_models(&m, &prompt, &a);
}

#[test]
fn streamed_text_equals_final_text() {
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let prompt = s.encode("the north").unwrap();
    let mut streamed = vec![String::new(); 3];
    let out = s
        .sample(&prompt, 3, &params(1), &mut |i, d| streamed[i].push_str(d))
        .unwrap();
    for (c, st) in out.iter().zip(&streamed) {
        assert_eq!(&c.text, st);
        assert_eq!(c.finish, FinishReason::Length);
        assert_eq!(c.tokens.len(), 12);
    }
}

#[test]
fn eos_and_stop_strings_end_completions() {
    let (m, tok) = setup();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 10,
        ..SamplingParams::default()
    };
    let prompt = Sampler::new(&m, &tok, &[]).encode("in the").unwrap();
    let free = Sampler::new(&m, &tok, &[])
        .sample(&prompt, 2, &greedy, &mut |_, _| {})
        .unwrap();
    assert_eq!(free[0], free[1], "greedy completions agree");
    let toks = &free[0].tokens;
    let eos = toks[3];
    let first = toks.iter().position(|&t| t == eos).unwrap();
    let eos_ids = [eos];
    let ended = Sampler::new(&m, &tok, &eos_ids)
        .sample(&prompt, 1, &greedy, &mut |_, _| {})
        .unwrap();
    assert_eq!(ended[0].finish, FinishReason::Eos);
    assert_eq!(ended[0].tokens, toks[..=first].to_vec());
    let text = &free[0].text;
    let stop: String = text
        .chars()
        .skip(text.chars().count() / 2)
        .take(2)
        .collect();
    let cut = text.find(&stop).unwrap();
    let p = SamplingParams {
        stop: vec![stop],
        ..greedy
    };
    let mut streamed = String::new();
    let out = Sampler::new(&m, &tok, &[])
        .sample(&prompt, 1, &p, &mut |_, d| streamed.push_str(d))
        .unwrap();
    assert_eq!(out[0].finish, FinishReason::Stop);
    assert_eq!(out[0].text, text[..cut]);
    assert_eq!(streamed, out[0].text);
}

#[test]
fn top_k_one_is_greedy_and_top_p_restricts() {
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let prompt = s.encode("the").unwrap();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 6,
        ..SamplingParams::default()
    };
    let k1 = SamplingParams {
        top_k: 1,
        temperature: 1.5,
        max_new_tokens: 6,
        seed: 5,
        ..SamplingParams::default()
    };
    let p0 = SamplingParams {
        top_p: 1e-6,
        temperature: 1.5,
        max_new_tokens: 6,
        seed: 6,
        ..SamplingParams::default()
    };
    let g = s.sample(&prompt, 1, &greedy, &mut |_, _| {}).unwrap();
    assert_eq!(
        s.sample(&prompt, 1, &k1, &mut |_, _| {}).unwrap()[0].tokens,
        g[0].tokens
    );
    assert_eq!(
        s.sample(&prompt, 1, &p0, &mut |_, _| {}).unwrap()[0].tokens,
        g[0].tokens
    );
}

#[test]
fn invalid_parameters_are_reported() {
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let err = |p: &SamplingParams, prompt: &[u32], n: usize| {
        s.sample(prompt, n, p, &mut |_, _| {})
            .unwrap_err()
            .to_string()
    };
    let ok = params(0);
    assert_eq!(err(&ok, &[], 1), "invalid parameter: the prompt is empty");
    assert_eq!(
        err(&ok, &[5], 0),
        "invalid parameter: the group size must be at least 1"
    );
    let t = SamplingParams {
        temperature: -1.0,
        ..ok.clone()
    };
    assert_eq!(
        err(&t, &[5], 1),
        "invalid parameter: temperature must be >= 0, got -1"
    );
    let p = SamplingParams {
        top_p: 0.0,
        ..ok.clone()
    };
    assert_eq!(
        err(&p, &[5], 1),
        "invalid parameter: top_p must be in (0, 1], got 0"
    );
    let long = SamplingParams {
        max_new_tokens: 1000,
        ..ok.clone()
    };
    assert_eq!(
        err(&long, &[5], 1),
        "invalid parameter: prompt (1 tokens) plus max new tokens (1000) exceeds the context of 256"
    );
    assert_eq!(
        err(&ok, &[100_000], 1),
        "invalid parameter: prompt token 100000 is outside the vocabulary of 267"
    );
}

#[test]
fn batched_rows_equal_lone_samples_and_their_caches_continue() {
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let prompts: Vec<Vec<u32>> = [
        "<|im_start|>user\nthe<|im_end|>\n",
        "<|im_start|>user\nwinter in the north<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nan otter<|im_end|>\n",
    ]
    .iter()
    .map(|t| s.encode(t).unwrap())
    .collect();
    let seeds = [5u64, 6, 7];
    let rows = prompts
        .iter()
        .zip(seeds)
        .map(|(p, seed)| (s.prefill(p, None).unwrap(), seed))
        .collect();
    let out = s
        .sample_rows(rows, &params(0), true, &mut |_, _| {})
        .unwrap();
    for ((p, seed), (c, cache)) in prompts.iter().zip(seeds).zip(&out) {
        let lone = s.sample(p, 1, &params(seed), &mut |_, _| {}).unwrap();
        assert_eq!(
            lone[0].tokens, c.tokens,
            "a batched row samples what it samples alone"
        );
        let cache = cache.as_ref().expect("kept");
        assert_eq!(cache.len(), p.len() + c.tokens.len() - 1);
    }
    // Continue row 1: its cache holds the prompt and all but the last completion token.
    let (c, cache) = &out[1];
    let mut longer = prompts[1].clone();
    longer.extend_from_slice(&c.tokens);
    longer.extend(s.encode("<|im_start|>user\nmore<|im_end|>\n").unwrap());
    let mut reused = s.prefill(&longer, None).unwrap().cache;
    reused.truncate(0).unwrap();
    let kept = s.sample_rows(
        vec![(
            s.prefill(&longer, Some(cache.as_ref().unwrap().row(0).unwrap()))
                .unwrap(),
            9,
        )],
        &params(0),
        false,
        &mut |_, _| {},
    );
    let fresh = s.sample(&longer, 1, &params(9), &mut |_, _| {}).unwrap();
    assert_eq!(kept.unwrap()[0].0.tokens, fresh[0].tokens);
    // A cache as long as the prompt cannot be reused for it.
    let full = s.prefill(&longer, None).unwrap().cache;
    let err = s.prefill(&longer, Some(full)).unwrap_err();
    assert!(
        err.to_string().contains("one row shorter than the prompt"),
        "{err}"
    );
}

#[test]
fn stop_strings_are_found_across_token_boundaries() {
    let (m, tok) = setup();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 16,
        ..SamplingParams::default()
    };
    let s = Sampler::new(&m, &tok, &[]);
    let prompt = s.encode("the north").unwrap();
    let free = s
        .sample(&prompt, 1, &greedy, &mut |_, _| {})
        .unwrap()
        .remove(0);
    // The text is the decoding of all its tokens (built one token at a time).
    assert_eq!(free.text, tok.decode(&free.tokens, true).unwrap());
    // A stop string made of the last character of one token's text and the first of the
    // next one's (a boundary where both are whole characters; the tiny random model also
    // writes bytes that are not UTF-8).
    let upto = |n: usize| tok.decode(&free.tokens[..n], true).unwrap();
    let whole = |c: Option<char>| c.is_some_and(|c| c != '\u{FFFD}');
    let k = (1..free.tokens.len())
        .find(|&k| {
            let (a, b) = (upto(k), upto(k + 1));
            b.starts_with(&a) && whole(a.chars().last()) && whole(b[a.len()..].chars().next())
        })
        .expect("a boundary between two tokens with text");
    let (a, b) = (upto(k), upto(k + 1));
    let stop = format!(
        "{}{}",
        a.chars().last().unwrap(),
        b[a.len()..].chars().next().unwrap()
    );
    let cut = free.text.find(&stop).unwrap();
    let p = SamplingParams {
        stop: vec![stop.clone(), "never appears ~~".into()],
        ..greedy
    };
    let mut streamed = String::new();
    let out = s
        .sample(&prompt, 1, &p, &mut |_, d| streamed.push_str(d))
        .unwrap()
        .remove(0);
    assert_eq!(
        out.finish,
        FinishReason::Stop,
        "{stop:?} in {:?}",
        free.text
    );
    assert_eq!(out.text, free.text[..cut]);
    assert_eq!(streamed, out.text);
    // It ended at the token that completed the stop string, not later.
    let ends = (1..=free.tokens.len())
        .find(|&n| upto(n).contains(&stop))
        .unwrap();
    assert_eq!(out.tokens, free.tokens[..ends].to_vec());
}

#[test]
fn find_stop_searches_only_where_a_new_match_can_start() {
    use spade_model::sample::find_stop;
    let stop = vec!["</a>".to_string(), "xyz".to_string()];
    // "</" was already searched; "a>" completes the string across the boundary.
    assert_eq!(find_stop("hello </a>", 7, &stop), Some(6));
    // A match wholly inside the searched text is not reported again (it was found then).
    assert_eq!(find_stop("</a> and more", 13, &stop), None);
    assert_eq!(find_stop("abxyz", 3, &stop), Some(2));
    // Multi-byte characters: the window starts on a character boundary.
    assert_eq!(find_stop("ééxyz", 5, &stop), Some(4));
    assert_eq!(find_stop("no match", 0, &stop), None);
    assert_eq!(find_stop("abc", 0, &["".to_string()]), None);
}

#[test]
fn nucleus_sampling_draws_only_from_the_smallest_set_reaching_top_p() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use spade_model::sample::pick;
    let mut rng = StdRng::seed_from_u64(5);
    for case in 0..20 {
        let vocab = [3usize, 70, 500, 5000][case % 4];
        let logits: Vec<f32> = (0..vocab).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        let top_p = [0.1, 0.5, 0.9, 0.99][case % 4];
        // The definition: sort by probability (ties by index), keep the shortest prefix whose
        // mass reaches top_p.
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let max = logits[order[0]];
        let w: Vec<f64> = order
            .iter()
            .map(|&i| f64::from(logits[i] - max).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let mut keep = vocab;
        for (n, x) in w.iter().enumerate() {
            acc += x;
            if acc >= top_p * total * (1.0 + 1e-12) {
                keep = n + 1;
                break;
            }
        }
        let nucleus: std::collections::HashSet<usize> = order[..keep].iter().copied().collect();
        let params = SamplingParams {
            top_p,
            ..SamplingParams::default()
        };
        let mut draw_rng = StdRng::seed_from_u64(case as u64);
        for _ in 0..200 {
            let (t, lp) = pick(&logits, &params, &mut draw_rng);
            assert!(nucleus.contains(&(t as usize)), "case {case}: {t} outside");
            assert!(lp <= 0.0);
        }
    }
}

#[test]
fn untruncated_sampling_is_the_inverse_cdf_in_vocabulary_order() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use spade_model::sample::pick;
    let mut rng = StdRng::seed_from_u64(11);
    for case in 0..12 {
        let vocab = [2usize, 9, 300, 49_152][case % 4];
        let logits: Vec<f32> = (0..vocab).map(|_| rng.random_range(-6.0f32..6.0)).collect();
        let temperature = [1.0, 0.7, 1.3][case % 3];
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        // By hand: weights exp((l - max) / T) in vocabulary order, one uniform draw scaled
        // by their total, the token whose interval holds it.
        let inv_t = 1.0 / temperature as f32;
        let w: Vec<f64> = logits
            .iter()
            .map(|&l| f64::from((l - max) * inv_t).exp())
            .collect();
        let lse = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
        let mut hand_rng = StdRng::seed_from_u64(100 + case as u64);
        let mut expected = Vec::new();
        for _ in 0..50 {
            let mut u = hand_rng.random::<f64>() * w.iter().sum::<f64>();
            let mut token = vocab - 1;
            for (i, x) in w.iter().enumerate() {
                if u < *x {
                    token = i;
                    break;
                }
                u -= x;
            }
            expected.push(token as u32);
        }
        // top_k = 0 and top_k = vocab (no cut) both sample the whole vocabulary.
        for top_k in [0, vocab] {
            let params = SamplingParams {
                temperature,
                top_k,
                ..SamplingParams::default()
            };
            let mut draw_rng = StdRng::seed_from_u64(100 + case as u64);
            let got: Vec<u32> = (0..50)
                .map(|_| {
                    let (t, lp) = pick(&logits, &params, &mut draw_rng);
                    assert_eq!(lp, logits[t as usize] - lse, "case {case}: log-prob of {t}");
                    t
                })
                .collect();
            assert_eq!(got, expected, "case {case}, top_k {top_k}");
        }
    }
}

/// Whether some `n`-gram occurs twice in `t`.
fn repeats_an_ngram(t: &[u32], n: usize) -> bool {
    let mut seen = std::collections::HashSet::new();
    t.windows(n).any(|w| !seen.insert(w.to_vec()))
}

#[test]
fn dry_keeps_a_greedy_loop_from_repeating_and_logprobs_stay_the_models() {
    use spade_model::dry::Dry;
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let prompt = s.encode("the winter").unwrap();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 60,
        ..SamplingParams::default()
    };
    let plain = s.sample(&prompt, 1, &greedy, &mut |_, _| {}).unwrap();
    // A tiny random model's greedy completion loops: the test means something.
    assert!(
        repeats_an_ngram(&plain[0].tokens, 3),
        "{:?}",
        plain[0].tokens
    );
    // With a penalty past any logit gap, greedy never takes a token that would continue a
    // repeat of 2 tokens, so no 3-gram of the completion occurs twice (by the definition of
    // the penalty: the 3rd token of a second occurrence continues a repeat of the first 2).
    let dry = SamplingParams {
        dry: Some(Dry {
            multiplier: 1e30,
            base: 1.0,
            allowed_length: 2,
        }),
        ..greedy.clone()
    };
    let out = s.sample(&prompt, 1, &dry, &mut |_, _| {}).unwrap();
    assert_eq!(out[0].tokens.len(), 60);
    assert!(!repeats_an_ngram(&out[0].tokens, 3), "{:?}", out[0].tokens);
    // The reported log-probabilities are the model's own, as the training path computes them.
    assert_logprobs_are_the_models(&m, &prompt, &out);
    // Bad settings are refused with what is wrong.
    let bad = SamplingParams {
        dry: Some(Dry {
            multiplier: 0.8,
            base: 0.5,
            allowed_length: 3,
        }),
        ..greedy
    };
    let err = s.sample(&prompt, 1, &bad, &mut |_, _| {}).unwrap_err();
    assert!(
        err.to_string()
            .contains("the DRY base must be finite and >= 1, got 0.5"),
        "{err}"
    );
}

/// The tokens of `c` that a guard fed with the text before each refuses: a token's text is
/// what it adds to the decoding of the tokens before it.
fn refused_at(
    tok: &tokenizers::Tokenizer,
    c: &Completion,
    guard: &spade_model::pyguard::PythonGuard,
) -> Option<usize> {
    let mut g = guard.clone();
    let mut before = String::new();
    for k in 0..c.tokens.len() {
        let text = tok.decode(&c.tokens[..=k], true).unwrap();
        let common = before
            .char_indices()
            .zip(text.chars())
            .find(|((_, a), b)| a != b)
            .map_or(before.len().min(text.len()), |((at, _), _)| at);
        let delta = &text[common..];
        if !g.allows(delta) {
            return Some(k);
        }
        g.feed(delta);
        before = text;
    }
    None
}

#[test]
fn the_python_guard_redraws_refused_tokens_and_logprobs_stay_the_models() {
    use spade_model::pyguard::PythonGuard;
    let (m, tok) = setup();
    let s = Sampler::new(&m, &tok, &[]);
    let prompt = s.encode("```python\nx = (").unwrap();
    let guard = PythonGuard::in_code();
    let free = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 40,
        seed: 11,
        ..SamplingParams::default()
    };
    let guarded = SamplingParams {
        python_guard: Some(guard.clone()),
        ..free.clone()
    };
    let a = s.sample(&prompt, 8, &free, &mut |_, _| {}).unwrap();
    let b = s.sample(&prompt, 8, &guarded, &mut |_, _| {}).unwrap();
    let mut refusals = 0;
    for (free, kept) in a.iter().zip(&b) {
        // Random bytes reach a dead end: a stray `)`, a line break in a string, a backtick.
        if let Some(k) = refused_at(&tok, free, &guard) {
            refusals += 1;
            // The same stream draws the same tokens up to the first refused one; there the
            // guarded completion took another.
            assert_eq!(kept.tokens[..k], free.tokens[..k]);
            assert_ne!(kept.tokens[k], free.tokens[k]);
        } else {
            assert_eq!(kept, free, "nothing refused, nothing redrawn");
        }
        assert_eq!(refused_at(&tok, kept, &guard), None, "{:?}", kept.text);
        assert_eq!(kept.tokens.len(), 40);
    }
    // The test means something: some free completion reached a dead end.
    assert!(refusals > 0, "no free completion was refused");
    // The log-probabilities kept are the model's own, as the training path computes them.
    assert_logprobs_are_the_models(&m, &prompt, &b);
}
