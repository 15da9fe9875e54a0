//! Quantised decode weights: the blocks' product against the dequantised f32 product, the
//! decoder's logits and greedy tokens with and without them, LoRA on top, the training path
//! untouched, and the named errors.
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng, rngs::StdRng};
use spade_model::load;
use spade_model::model::kernels::decode_quant_matmul as quant_matmul;
use spade_model::model::quant::{BlockFormat, QuantWeight};
use spade_model::model::{DecodeActivations, DecodeWeights, Decoder, KvCache, LoraConfig, lora};
use spade_model::sample::{Sampler, SamplingParams};

/// The 8-bit input path, which the tests before the f32-input ones check.
const Q8: DecodeActivations = DecodeActivations::Q8;

use super::common::{ids, max_diff, tiny_llama_with_vocab, tiny_tokenizer};
use super::gguf::{OK, tmp, write_gguf};

fn randn(rows: usize, cols: usize, seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    let v: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-1.0f32..1.0) * rng.random_range(0.0f32..2.0))
        .collect();
    Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2().unwrap()
}

/// The bound the kernel's documentation states: rounding each input block of 32 values to 8
/// bits (step `max|x| / 127`) moves a product by at most half a step times the block's
/// `sum |w|`; plus 1e-5 of `sum |w x|` for f32 summation order.
fn bound(x: &[f32], w: &[f32]) -> f32 {
    let mut b = 0.0;
    let mut mag = 0.0;
    for (xb, wb) in x.chunks(32).zip(w.chunks(32)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        b += amax / 127.0 / 2.0 * wb.iter().map(|v| v.abs()).sum::<f32>();
        mag += xb.iter().zip(wb).map(|(a, c)| (a * c).abs()).sum::<f32>();
    }
    b + 1e-5 * mag + 1e-6
}

#[test]
fn block_products_stay_within_the_activation_rounding_bound() {
    for (format, ggml) in [
        (BlockFormat::Q8_0, GgmlDType::Q8_0),
        (BlockFormat::Q4_1, GgmlDType::Q4_1),
    ] {
        for (n_rows, k, n) in [
            (1, 64, 70),
            (3, 96, 33),
            (8, 32, 64),
            (9, 128, 5),
            (17, 64, 40),
        ] {
            let w = randn(n, k, 1 + k as u64);
            let q = QTensor::quantize(&w, ggml).unwrap();
            let blocks = QuantWeight::from_qtensor(&q).unwrap().unwrap();
            assert_eq!(blocks.format(), format);
            assert_eq!(blocks.dims(), (n, k));
            assert_eq!(blocks.bytes(), n * k / 32 * format.block_bytes());
            // The blocks encode exactly what candle's dequantisation gives.
            let deq = blocks.dequantize(&Device::Cpu).unwrap();
            assert_eq!(max_diff(&deq, &q.dequantize(&Device::Cpu).unwrap()), 0.0);
            let x = randn(n_rows, k, 7 + n_rows as u64);
            let got = rows(
                &quant_matmul::matmul_t_with(&blocks, &x, quant_matmul::kernel(), Q8, None)
                    .unwrap(),
            );
            let want = rows(&x.matmul(&deq.t().unwrap()).unwrap());
            let (xs, ws) = (rows(&x), rows(&deq));
            for r in 0..n_rows {
                for j in 0..n {
                    let d = (got[r][j] - want[r][j]).abs();
                    let b = bound(&xs[r], &ws[j]);
                    assert!(
                        d <= b,
                        "{format:?} {n_rows}x{k}x{n} [{r},{j}]: {d} > bound {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn unpermuting_block_rows_equals_quantising_unpermuted_rows() {
    let w = randn(16, 64, 3);
    let heads = 2;
    for ggml in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
        let permuted = load::gguf::permute(&w, heads).unwrap();
        let from_file = QuantWeight::from_qtensor(&QTensor::quantize(&permuted, ggml).unwrap())
            .unwrap()
            .unwrap()
            .unpermute_rows(heads)
            .unwrap();
        let direct = QuantWeight::from_qtensor(&QTensor::quantize(&w, ggml).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(from_file, direct);
    }
}

/// Logits of `prompt` then of each of `steps` after it, on the inference path.
fn decode_logits(model: &Decoder, prompt: &Tensor, steps: &[u32]) -> Vec<Tensor> {
    let mut cache: KvCache = model.new_cache();
    let mut out = vec![model.forward(prompt, &mut cache).unwrap()];
    for &t in steps {
        let x = Tensor::new(&[[t]], &Device::Cpu).unwrap();
        out.push(model.forward(&x, &mut cache).unwrap());
    }
    out
}

/// Stated tolerance for whole-model logits: 10% of the logits' largest magnitude, plus 0.02.
/// Every product's 8-bit input rounding is at most half a step (1/254 of a block's largest
/// input; checked exactly above), but the tiny random model's activations are spiky (a block's
/// largest value is several times its typical one) and the errors of 2 layers x 7 products,
/// the attention softmax and the head add up: about 5% of the largest logit was seen. A wrong
/// block layout or scale moves logits by their own size, far outside this.
fn tolerance(reference: &Tensor) -> f32 {
    let mag = reference
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    0.1 * mag + 0.02
}

/// The tiny GGUF of `super::gguf` (Q4_1, Q8_0 and F32 tensors), loaded.
fn tiny_gguf(name: &str) -> load::LoadedModel {
    let cfg = tiny_llama_with_vocab();
    let (_m, vm) = Decoder::random(&cfg, 5, 0.2, &Device::Cpu).unwrap();
    let path = tmp(name);
    write_gguf(&path, &vm, &cfg, OK);
    load::load(&path, &Device::Cpu).unwrap()
}

#[test]
fn quantised_decode_logits_equal_the_f32_path_within_tolerance() {
    let mut loaded = tiny_gguf("quant-logits.gguf");
    let model = &mut loaded.model;
    let prompt = ids(1, 9, model.config().vocab_size, 4);
    let steps = [5u32, 77, 130, 9, 200];
    let f32_path = model.set_decode_weights(DecodeWeights::F32, Q8).unwrap();
    assert_eq!(f32_path.formats.keys().collect::<Vec<_>>(), ["f32"]);
    let want = decode_logits(model, &prompt, &steps);
    for weights in [DecodeWeights::Gguf, DecodeWeights::Q8_0] {
        let path = model.set_decode_weights(weights, Q8).unwrap();
        assert!(path.weight_bytes < f32_path.weight_bytes, "{path}");
        let got = decode_logits(model, &prompt, &steps);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d <= tolerance(w), "{weights} step {i}: {d}");
            assert!(d > 0.0, "{weights} step {i}: the blocks were not read");
        }
    }
    // `gguf` reads the file's own blocks where it has them (its Q4_1 and Q8_0 tensors) and f32
    // for its F32 tensors; `q8_0` quantises every projection.
    let path = model.set_decode_weights(DecodeWeights::Gguf, Q8).unwrap();
    let cfg = model.config().clone();
    let layers = cfg.num_hidden_layers;
    // Per layer: attn_k, ffn_up, attn_output in Q4_1; attn_v, ffn_down in Q8_0; the tied head
    // reads token_embd (Q8_0); attn_q and ffn_gate are F32 in the file.
    assert_eq!(path.formats["q4_1"], 3 * layers, "{path}");
    assert_eq!(path.formats["q8_0"], 2 * layers + 1, "{path}");
    assert_eq!(path.formats["f32"], 2 * layers, "{path}");
    let path = model.set_decode_weights(DecodeWeights::Q8_0, Q8).unwrap();
    assert_eq!(path.formats["q8_0"], 7 * layers + 1, "{path}");
    assert_eq!(path.formats.len(), 1, "{path}");
    // A model that is not a GGUF has no blocks: `gguf` decodes it in f32.
    let (mut plain, _) = Decoder::random(&cfg, 2, 0.2, &Device::Cpu).unwrap();
    let path = plain.set_decode_weights(DecodeWeights::Gguf, Q8).unwrap();
    assert_eq!(path.formats.keys().collect::<Vec<_>>(), ["f32"], "{path}");
}

#[test]
fn greedy_tokens_agree_where_the_margin_exceeds_the_tolerance() {
    let mut loaded = tiny_gguf("quant-greedy.gguf");
    let tok = tiny_tokenizer();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 24,
        ..SamplingParams::default()
    };
    let sample = |m: &Decoder| {
        let s = Sampler::new(m, &tok, &[]);
        let prompt = s
            .encode("<|im_start|>user\nthe winter<|im_end|>\n")
            .unwrap();
        (
            prompt.clone(),
            s.sample(&prompt, 1, &greedy, &mut |_, _| {})
                .unwrap()
                .remove(0),
        )
    };
    loaded
        .model
        .set_decode_weights(DecodeWeights::F32, Q8)
        .unwrap();
    let (prompt, f32_out) = sample(&loaded.model);
    let x = Tensor::new(prompt.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let f32_logits = decode_logits(&loaded.model, &x, &f32_out.tokens);
    for weights in [DecodeWeights::Gguf, DecodeWeights::Q8_0] {
        loaded.model.set_decode_weights(weights, Q8).unwrap();
        let (_, q_out) = sample(&loaded.model);
        // Token by token, while the f32 path's top two logits are further apart than twice
        // the tolerance, the quantised path must pick the same token.
        let mut agreed = 0;
        for (i, logits) in f32_logits.iter().take(f32_out.tokens.len()).enumerate() {
            let mut v: Vec<f32> = logits.squeeze(0).unwrap().to_vec1().unwrap();
            v.sort_by(|a, b| b.total_cmp(a));
            if v[0] - v[1] <= 2.0 * tolerance(logits) {
                break;
            }
            assert_eq!(q_out.tokens[i], f32_out.tokens[i], "{weights} token {i}");
            agreed += 1;
        }
        assert_eq!(q_out.tokens[..agreed], f32_out.tokens[..agreed]);
    }
}

#[test]
fn lora_applies_in_f32_on_top_of_the_blocks_and_training_reads_f32() {
    let mut loaded = tiny_gguf("quant-lora.gguf");
    let mut model = loaded.model.clone();
    let lcfg = LoraConfig::default();
    let adapters = lora::attach_new(&mut model, &lcfg, 3).unwrap();
    // Give every B a value so that the adapters change the output.
    for var in adapters.all_vars() {
        if var.dims()[1] == lcfg.r {
            let t = randn(var.dims()[0], var.dims()[1], 11);
            var.set(&(t * 0.2).unwrap()).unwrap();
        }
    }
    let prompt = ids(1, 7, model.config().vocab_size, 8);
    let train_before = model.forward_train(&prompt).unwrap();
    model.set_decode_weights(DecodeWeights::F32, Q8).unwrap();
    let want = decode_logits(&model, &prompt, &[3, 4]);
    loaded
        .model
        .set_decode_weights(DecodeWeights::F32, Q8)
        .unwrap();
    let base = decode_logits(&loaded.model, &prompt, &[3, 4]);
    model.set_decode_weights(DecodeWeights::Gguf, Q8).unwrap();
    let got = decode_logits(&model, &prompt, &[3, 4]);
    for ((g, w), b) in got.iter().zip(&want).zip(&base) {
        assert!(max_diff(w, b) > 10.0 * tolerance(w), "the adapters matter");
        assert!(max_diff(g, w) <= tolerance(w));
    }
    // The training path never reads the blocks: bit-identical logits.
    assert_eq!(
        max_diff(&model.forward_train(&prompt).unwrap(), &train_before),
        0.0
    );
    let _ = adapters;
}

#[test]
fn decode_weights_errors_name_the_problem() {
    assert_eq!(
        "q4".parse::<DecodeWeights>().unwrap_err(),
        "unknown decode weights `q4` (expected f32, q8_0 or gguf)"
    );
    let err = QuantWeight::quantize(&randn(2, 33, 1), BlockFormat::Q8_0).unwrap_err();
    // (candle appends a backtrace when RUST_BACKTRACE is set)
    assert!(
        err.to_string()
            .starts_with("cannot quantise a weight of 33 columns into blocks of 32"),
        "{err}"
    );
    let err = spade_selfplay::config::TrainConfig::parse("decode_weights = \"q4\"", true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown variant `q4`, expected one of `f32`, `q8_0`, `gguf`"),
        "{err}"
    );
    let cfg = spade_selfplay::config::TrainConfig::parse(
        "decode_weights = \"q8_0\"\nrecompute_old_logprobs = false",
        true,
    )
    .unwrap();
    assert_eq!(cfg.decode_weights, DecodeWeights::Q8_0);
    assert!(!cfg.recompute_old_logprobs);
    assert_eq!(
        "int8".parse::<DecodeActivations>().unwrap_err(),
        "unknown decode activations `int8` (expected f32 or q8)"
    );
    let err = spade_selfplay::config::TrainConfig::parse("decode_activations = \"int8\"", true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown variant `int8`, expected `f32` or `q8`"),
        "{err}"
    );
    let cfg =
        spade_selfplay::config::TrainConfig::parse("decode_activations = \"q8\"", true).unwrap();
    assert_eq!(cfg.decode_activations, DecodeActivations::Q8);
    let default = spade_selfplay::config::TrainConfig::default();
    assert_eq!(default.decode_weights, DecodeWeights::Gguf);
    assert_eq!(
        default.decode_activations,
        DecodeActivations::F32,
        "sampling in training reads the trained policy by default"
    );
    assert!(
        default.recompute_old_logprobs,
        "quantised decoding by default needs the recompute by default"
    );
}

#[test]
fn inference_policies_sample_from_the_chosen_decode_weights() {
    use spade_selfplay::{CandlePolicy, Policy, TrainConfig};
    let cfg = TrainConfig::default();
    // `spade eval`'s policy: the GGUF's own blocks by default, f32 when asked.
    let gguf = CandlePolicy::for_inference(
        tiny_gguf("quant-eval-a.gguf"),
        &cfg.policy(),
        DecodeWeights::Gguf,
        DecodeActivations::F32,
    )
    .unwrap()
    .decode_path()
    .unwrap();
    assert!(
        gguf.starts_with("gguf, f32 activations (")
            && gguf.contains("q4_1")
            && gguf.contains("quant-f32act/"),
        "{gguf}"
    );
    let f32_path = CandlePolicy::for_inference(
        tiny_gguf("quant-eval-b.gguf"),
        &cfg.policy(),
        DecodeWeights::F32,
        DecodeActivations::F32,
    )
    .unwrap()
    .decode_path()
    .unwrap();
    assert!(
        f32_path.starts_with("f32 (") && !f32_path.contains("q4_1"),
        "{f32_path}"
    );
    // A policy that fine-tunes every weight still samples from f32 (blocks would go stale).
    let full = TrainConfig {
        lora: false,
        ..TrainConfig::default()
    };
    let trained = CandlePolicy::new(tiny_gguf("quant-eval-c.gguf"), &full.policy())
        .unwrap()
        .decode_path()
        .unwrap();
    assert!(trained.starts_with("f32 ("), "{trained}");
}

/// The f32-input path samples the trained policy: greedy decoding of the tiny GGUF through
/// its Q4_1 and Q8_0 blocks (prefill included) picks, at every step, the training path's argmax over the same
/// sequence, and each token's log-probability equals the training path's within 1e-4 (the
/// products differ only in f32 summation order, a few units in the 7th digit; 1e-4 leaves
/// room for their growth through two layers, softmax and the head, while the 8-bit input
/// path misses it by orders of magnitude on the same model). With LoRA adapters too, as
/// `spade train` samples.
#[test]
fn f32_input_decoding_gives_the_training_paths_tokens_and_logprobs() {
    use spade_model::logprob::{Pair, completion_logprobs};
    let loaded = tiny_gguf("quant-f32act-greedy.gguf");
    let tok = tiny_tokenizer();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 24,
        ..SamplingParams::default()
    };
    let mut adapted = loaded.model.clone();
    let lcfg = LoraConfig::default();
    let adapters = lora::attach_new(&mut adapted, &lcfg, 9).unwrap();
    for var in adapters.all_vars() {
        if var.dims()[1] == lcfg.r {
            let t = randn(var.dims()[0], var.dims()[1], 13);
            var.set(&(t * 0.2).unwrap()).unwrap();
        }
    }
    let mut worst = [0f32; 2];
    for mut model in [loaded.model.clone(), adapted] {
        // Where the decode reads blocks, which activations it gives them.
        for (act, w) in [(DecodeActivations::F32, 0), (Q8, 1)] {
            let path = model.set_decode_weights(DecodeWeights::Gguf, act).unwrap();
            assert!(path.formats.contains_key("q4_1"), "{path}");
            let s = Sampler::new(&model, &tok, &[]);
            // Longer than a decode step's rows: the prefill reads the blocks too.
            let prompt = s
                .encode("<|im_start|>user\nthe winter the winter the winter the winter<|im_end|>\n")
                .unwrap();
            assert!(prompt.len() > quant_matmul::MAX_ROWS, "{}", prompt.len());
            let out = s
                .sample(&prompt, 1, &greedy, &mut |_, _| {})
                .unwrap()
                .remove(0);
            assert_eq!(out.tokens.len(), 24);
            let seq: Vec<u32> = prompt.iter().chain(&out.tokens).copied().collect();
            let x = Tensor::new(seq.as_slice(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let logits = model.forward_train(&x).unwrap().squeeze(0).unwrap();
            let trained = completion_logprobs(
                &model,
                &[Pair {
                    prompt: &prompt,
                    completion: &out.tokens,
                }],
            )
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
            for (i, &t) in out.tokens.iter().enumerate() {
                let row: Vec<f32> = logits.get(prompt.len() - 1 + i).unwrap().to_vec1().unwrap();
                let best = (0..row.len())
                    .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                    .unwrap() as u32;
                if act == DecodeActivations::F32 {
                    assert_eq!(t, best, "token {i}: the training path's argmax is {best}");
                }
                worst[w] = worst[w].max((out.logprobs[i] - trained[i]).abs());
            }
        }
    }
    assert!(
        worst[0] <= 1e-4,
        "f32 inputs: |Δ log-prob| up to {}",
        worst[0]
    );
    assert!(
        worst[1] > 1e-2,
        "the 8-bit inputs should miss the bound on this model: {}",
        worst[1]
    );
    eprintln!(
        "max |Δ log-prob|: f32 inputs {}, 8-bit inputs {}",
        worst[0], worst[1]
    );
}
