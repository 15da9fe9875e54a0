//! Gradient flow, finite differences, and training-path vs inference-path logits.
use std::collections::BTreeMap;

use candle_core::{D, DType, Device, IndexOp, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use spade_model::logprob::{Spans, span_logprobs_and_entropy_for_update};
use spade_model::model::{
    Decoder, KvCache, LoraConfig, PREFILL_CHUNK, TrainAttention, TrainMemory, init, lora, train_ops,
};

use super::common::{FAMILIES, ids, max_abs, max_diff, model, tiny};

/// Mean next-token NLL of `ids` on the training path.
fn nll(model: &Decoder, ids: &Tensor) -> Tensor {
    let t = ids.dim(1).unwrap();
    let logits = model
        .forward_train(ids)
        .unwrap()
        .narrow(1, 0, t - 1)
        .unwrap();
    let lp = train_ops::log_softmax(&logits).unwrap();
    let targets = ids
        .narrow(1, 1, t - 1)
        .unwrap()
        .contiguous()
        .unwrap()
        .unsqueeze(2)
        .unwrap();
    lp.gather(&targets, 2)
        .unwrap()
        .mean_all()
        .unwrap()
        .neg()
        .unwrap()
}

#[test]
fn every_trainable_tensor_gets_a_nonzero_gradient() {
    for family in FAMILIES {
        let cfg = tiny(family);
        let (model, varmap) = model(&cfg, 7);
        let grads = nll(&model, &ids(2, 9, cfg.vocab_size, 1))
            .backward()
            .unwrap();
        let data = varmap.data().lock().unwrap();
        assert!(data.len() > 10, "{family}: only {} vars", data.len());
        for (name, var) in data.iter() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{family}: no gradient for {name}"));
            let norm = g
                .abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(
                norm > 0.0 && norm.is_finite(),
                "{family}: gradient of {name} is {norm}"
            );
        }
    }
}

#[test]
fn blockwise_attention_gives_the_plain_paths_loss_and_gradients() {
    // 70 positions: past one 64-position block, so the online softmax spans two blocks.
    for family in FAMILIES {
        let cfg = tiny(family);
        let (mut model, varmap) = model(&cfg, 11);
        let ids = ids(2, 70, cfg.vocab_size, 4);
        let run = |model: &Decoder| {
            let loss = nll(model, &ids);
            let grads = loss.backward().unwrap();
            let data = varmap.data().lock().unwrap();
            let grads: Vec<(String, Tensor)> = data
                .iter()
                .map(|(name, var)| (name.clone(), grads.get(var.as_tensor()).unwrap().clone()))
                .collect();
            (loss.to_scalar::<f32>().unwrap(), grads)
        };
        let (blockwise_loss, blockwise) = run(&model);
        model.set_train_attention(TrainAttention::Plain);
        let (plain_loss, plain) = run(&model);
        assert!(
            (blockwise_loss - plain_loss).abs() < 1e-5,
            "{family}: loss {blockwise_loss} vs {plain_loss}"
        );
        for ((name, b), (_, p)) in blockwise.iter().zip(&plain) {
            let size = max_abs(p);
            let diff = max_diff(b, p);
            assert!(
                diff <= 1e-4 * size.max(1e-3),
                "{family}: gradient of {name} differs by {diff} (size {size})"
            );
        }
    }
}

/// Every variable's gradient of the summed log-probabilities and entropies of `rows`, taken
/// the way an update takes them with `model`'s [`TrainMemory`]: the loss's own backward, then,
/// with checkpointed or saved layers, [`Decoder::backward_layers`], each variable's parts
/// summed.
fn update_gradients(
    model: &Decoder,
    vars: &[(String, Var)],
    rows: &[Spans],
) -> (f32, BTreeMap<String, Tensor>) {
    let (lp, entropy, ck) = span_logprobs_and_entropy_for_update(model, rows).unwrap();
    let loss = (lp.sum_all().unwrap() + (entropy.sum_all().unwrap() * 0.5).unwrap()).unwrap();
    let mut sums: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut add = |g: &candle_core::backprop::GradStore| {
        for (name, var) in vars {
            if let Some(g) = g.get(var.as_tensor()) {
                let sum = match sums.remove(name) {
                    Some(s) => (s + g).unwrap(),
                    None => g.clone(),
                };
                sums.insert(name.clone(), sum);
            }
        }
    };
    let head = loss.backward().unwrap();
    add(&head);
    if let Some(ck) = ck {
        let grad = head.get(ck.output()).unwrap().clone();
        model
            .backward_layers(ck, grad, |g| {
                add(g);
                Ok(())
            })
            .unwrap();
    }
    (loss.to_scalar::<f32>().unwrap(), sums)
}

#[test]
fn checkpointed_and_saved_layers_give_the_kept_graphs_loss_and_gradients() {
    // Three rows of different lengths (so two are right-padded), one with two scored spans;
    // 70 positions in the longest, past one attention block. Full fine-tuning (every weight,
    // the tied embedding reached through the head and the input) and LoRA adapters.
    let long: Vec<u32> = (0..60).map(|i| (i * 7 % 50) as u32 + 3).collect();
    let spans_a = [0..4, 6..10];
    let spans_b = std::slice::from_ref(&(0..long.len())).to_vec();
    let spans_c = std::slice::from_ref(&(0..3)).to_vec();
    for family in FAMILIES {
        let cfg = tiny(family);
        for lora_rank in [None, Some(4)] {
            let (mut model, varmap) = model(&cfg, 13);
            let vars: Vec<(String, Var)> = match lora_rank {
                None => varmap.data().lock().unwrap().clone().into_iter().collect(),
                Some(r) => {
                    let lcfg = LoraConfig {
                        r,
                        lora_alpha: 8.0,
                        ..LoraConfig::default()
                    };
                    let adapters = lora::attach_new(&mut model, &lcfg, 5).unwrap();
                    // Fresh adapters have B = 0, which would leave A without a gradient.
                    let vars: Vec<(String, Var)> = adapters
                        .data()
                        .lock()
                        .unwrap()
                        .clone()
                        .into_iter()
                        .collect();
                    for (name, var) in vars.iter().filter(|(n, _)| n.contains("lora_B")) {
                        let n = var.elem_count();
                        let fill: Vec<f32> = (0..n)
                            .map(|i| ((i * 37 + name.len()) as f32).sin() * 0.1)
                            .collect();
                        var.set(&Tensor::from_vec(fill, var.shape(), &Device::Cpu).unwrap())
                            .unwrap();
                    }
                    vars
                }
            };
            let completion_a: Vec<u32> = (0..10).map(|i| i + 20).collect();
            let rows = [
                Spans {
                    prompt: &[5, 6, 7],
                    completion: &completion_a,
                    spans: &spans_a,
                },
                Spans {
                    prompt: &long[..10],
                    completion: &long,
                    spans: &spans_b,
                },
                Spans {
                    prompt: &[9],
                    completion: &[30, 31, 32],
                    spans: &spans_c,
                },
            ];
            model.set_train_memory(TrainMemory::Kept);
            let (kept_loss, kept) = update_gradients(&model, &vars, &rows);
            assert_eq!(
                kept.len(),
                vars.len(),
                "{family}: a variable has no gradient"
            );
            for memory in [TrainMemory::Checkpointed, TrainMemory::Saved] {
                model.set_train_memory(memory);
                let (loss, grads) = update_gradients(&model, &vars, &rows);
                let what = format!("{family}, LoRA {lora_rank:?}, {memory:?}");
                assert_eq!(kept_loss, loss, "{what}: the loss");
                assert_eq!(
                    kept.keys().collect::<Vec<_>>(),
                    grads.keys().collect::<Vec<_>>(),
                    "{what}"
                );
                for (name, k) in &kept {
                    let c = &grads[name];
                    let size = max_abs(k);
                    assert!(size > 0.0, "{what}: the gradient of {name} is 0");
                    let diff = max_diff(k, c);
                    assert!(
                        diff <= 1e-5 * size.max(1e-3),
                        "{what}: gradient of {name} differs by {diff} (size {size})"
                    );
                }
            }
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    let cfg = tiny("qwen3");
    let varmap = VarMap::new();
    let model = Decoder::new(
        &cfg,
        VarBuilder::from_varmap(&varmap, DType::F64, &Device::Cpu),
    )
    .unwrap();
    init::randomize(&varmap, 3, 0.2, |_| true).unwrap();
    let ids = ids(1, 6, cfg.vocab_size, 2);
    let loss = |m: &Decoder| nll(m, &ids).to_scalar::<f64>().unwrap();
    let grads = nll(&model, &ids).backward().unwrap();
    let names = [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_norm.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.norm.weight",
    ];
    for name in names {
        let var = varmap.data().lock().unwrap()[name].clone();
        let analytic: Vec<f64> = grads
            .get(var.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let original = var.as_tensor().copy().unwrap();
        let flat: Vec<f64> = original.flatten_all().unwrap().to_vec1().unwrap();
        // The entry with the largest gradient, and one in the middle.
        let big = (0..flat.len())
            .max_by(|&a, &b| analytic[a].abs().total_cmp(&analytic[b].abs()))
            .unwrap();
        for idx in [big, flat.len() / 2] {
            let eps = 1e-5;
            let probe = |delta: f64| {
                let mut v = flat.clone();
                v[idx] += delta;
                var.set(&Tensor::from_vec(v, original.shape(), &Device::Cpu).unwrap())
                    .unwrap();
                loss(&model)
            };
            let numeric = (probe(eps) - probe(-eps)) / (2.0 * eps);
            var.set(&original).unwrap();
            let tol = 1e-6 + 1e-4 * numeric.abs().max(analytic[idx].abs());
            assert!(
                (numeric - analytic[idx]).abs() < tol,
                "{name}[{idx}]: numeric {numeric} vs analytic {}",
                analytic[idx]
            );
        }
    }
}

#[test]
fn training_logits_equal_kv_cache_logits() {
    for family in FAMILIES {
        let cfg = tiny(family);
        let (model, _vm) = model(&cfg, 11);
        let ids = ids(1, 10, cfg.vocab_size, 5);
        let train = model.forward_train(&ids).unwrap();
        let mut cache = model.new_cache();
        let prefill = model
            .forward(&ids.narrow(1, 0, 4).unwrap(), &mut cache)
            .unwrap();
        let d = max_diff(&prefill, &train.i((.., 3, ..)).unwrap());
        assert!(d < 1e-4, "{family}: prefill differs by {d}");
        for pos in 4..10 {
            let step = model
                .forward(&ids.narrow(1, pos, 1).unwrap(), &mut cache)
                .unwrap();
            let d = max_diff(&step, &train.i((.., pos, ..)).unwrap());
            assert!(d < 1e-4, "{family}: position {pos} differs by {d}");
        }
        assert_eq!(cache.len(), 10);
    }
}

#[test]
fn expanded_cache_rows_match_independent_sequences() {
    let cfg = tiny("llama");
    let (model, _vm) = model(&cfg, 4);
    let prompt = ids(1, 5, cfg.vocab_size, 8);
    let conts = ids(3, 4, cfg.vocab_size, 9);
    let mut cache = model.new_cache();
    model.forward(&prompt, &mut cache).unwrap();
    let mut group = cache.expand(3).unwrap();
    let mut last = None;
    for pos in 0..4 {
        last = Some(
            model
                .forward(&conts.narrow(1, pos, 1).unwrap(), &mut group)
                .unwrap(),
        );
    }
    let full = Tensor::cat(&[&prompt.repeat((3, 1)).unwrap(), &conts], 1).unwrap();
    let train = model.forward_train(&full).unwrap().i((.., 8, ..)).unwrap();
    assert!(max_diff(&last.unwrap(), &train) < 1e-4);
    // Dropping a row keeps the others aligned.
    group.select_rows(&[2, 0]).unwrap();
    let next = ids(2, 1, cfg.vocab_size, 10);
    let step = model.forward(&next, &mut group).unwrap();
    let rows = Tensor::new(&[2u32, 0], &Device::Cpu).unwrap();
    let full2 = Tensor::cat(&[&full.index_select(&rows, 0).unwrap(), &next], 1).unwrap();
    let train2 = model.forward_train(&full2).unwrap().i((.., 9, ..)).unwrap();
    assert!(max_diff(&step, &train2) < 1e-4);
}

#[test]
fn right_padding_does_not_change_earlier_logits() {
    let cfg = tiny("qwen2");
    let (model, _vm) = model(&cfg, 2);
    let a = ids(1, 6, cfg.vocab_size, 3);
    let padded = Tensor::cat(
        &[
            &a,
            &Tensor::zeros((1, 3), DType::U32, &Device::Cpu).unwrap(),
        ],
        1,
    )
    .unwrap();
    let la = model.forward_train(&a).unwrap();
    let lp = model
        .forward_train(&padded)
        .unwrap()
        .narrow(1, 0, 6)
        .unwrap();
    assert!(max_diff(&la, &lp) < 1e-5);
    let _ = D::Minus1;
}

#[test]
fn lora_gradients_skip_the_base_and_match_the_plain_matmul_path() {
    use spade_model::model::{LoraConfig, lora};
    for family in FAMILIES {
        let cfg = tiny(family);
        let (mut m, base_vm) = model(&cfg, 7);
        let adapters = lora::attach_new(&mut m, &LoraConfig::default(), 3).unwrap();
        // Nonzero B so that A receives a gradient too.
        init::randomize(&adapters, 4, 0.1, |n| n.contains("lora_B")).unwrap();
        for v in adapters.all_vars() {
            if v.as_tensor().sum_all().unwrap().to_scalar::<f32>().unwrap() == 0.0 {
                let t = (v.as_tensor().ones_like().unwrap() * 0.05).unwrap();
                v.set(&t).unwrap();
            }
        }
        let x = ids(2, 6, cfg.vocab_size, 1);
        let frozen = nll(&m, &x).backward().unwrap();
        for v in base_vm.all_vars() {
            assert!(
                frozen.get(v.as_tensor()).is_none(),
                "{family}: a base weight got a gradient"
            );
        }
        // A no-grad view computes the same values with no graph.
        let view = m.without_grad();
        assert_eq!(
            max_diff(&nll(&view, &x), &nll(&m, &x)),
            0.0,
            "{family}: no-grad view differs"
        );
        let none = nll(&view, &x).backward().unwrap();
        for v in base_vm.all_vars().iter().chain(adapters.all_vars().iter()) {
            assert!(
                none.get(v.as_tensor()).is_none(),
                "{family}: no-grad view tracked a weight"
            );
        }
        // The same adapters with base weights tracked (plain matmul backward).
        m.set_train_base(true);
        let plain = nll(&m, &x).backward().unwrap();
        for (name, v) in adapters.data().lock().unwrap().iter() {
            let a = frozen
                .get(v.as_tensor())
                .unwrap_or_else(|| panic!("{family}: no gradient for {name}"));
            let b = plain.get(v.as_tensor()).unwrap();
            let norm = a
                .abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(norm > 0.0, "{family}: zero gradient for {name}");
            assert!(
                max_diff(a, b) < 1e-5,
                "{family}: {name} differs by {}",
                max_diff(a, b)
            );
        }
    }
}

/// Logits of the last position of `seq` `(1, t)` on the training path.
fn last_train_logits(model: &Decoder, seq: &Tensor) -> Tensor {
    let t = seq.dim(1).unwrap();
    model
        .forward_train(seq)
        .unwrap()
        .i((.., t - 1, ..))
        .unwrap()
}

#[test]
fn stacked_rows_of_different_lengths_match_independent_sequences() {
    for family in FAMILIES {
        let cfg = tiny(family);
        let (model, _vm) = model(&cfg, 12);
        let prompts = [
            ids(1, 3, cfg.vocab_size, 20),
            ids(1, 9, cfg.vocab_size, 21),
            ids(1, 6, cfg.vocab_size, 22),
        ];
        let caches: Vec<KvCache> = prompts
            .iter()
            .map(|p| {
                let mut c = model.new_cache();
                model.forward(p, &mut c).unwrap();
                c
            })
            .collect();
        let mut batch = KvCache::stack(caches).unwrap();
        assert_eq!(batch.positions(), &[3, 9, 6]);
        let conts = ids(3, 4, cfg.vocab_size, 23);
        let mut seqs: Vec<Tensor> = prompts.to_vec();
        for pos in 0..4 {
            let step = conts.narrow(1, pos, 1).unwrap();
            let logits = model.forward(&step, &mut batch).unwrap();
            for (r, seq) in seqs.iter_mut().enumerate() {
                *seq = Tensor::cat(&[&*seq, &step.i(r..r + 1).unwrap()], 1).unwrap();
                let d = max_diff(
                    &logits.i(r..r + 1).unwrap(),
                    &last_train_logits(&model, seq),
                );
                assert!(d < 1e-4, "{family}: row {r} step {pos} differs by {d}");
            }
        }
        // A row taken out of the batch continues its own sequence.
        let mut alone = batch.row(0).unwrap();
        assert_eq!(alone.len(), 7);
        let more = ids(1, 5, cfg.vocab_size, 24);
        let logits = model.forward(&more, &mut alone).unwrap();
        let full = Tensor::cat(&[&seqs[0], &more], 1).unwrap();
        let d = max_diff(&logits, &last_train_logits(&model, &full));
        assert!(d < 1e-4, "{family}: continued row differs by {d}");
        // Dropping rows keeps each remaining row's padding and position.
        batch.select_rows(&[2, 1]).unwrap();
        let step = ids(2, 1, cfg.vocab_size, 25);
        let logits = model.forward(&step, &mut batch).unwrap();
        for (slot, r) in [2usize, 1].into_iter().enumerate() {
            let full = Tensor::cat(&[&seqs[r], &step.i(slot..slot + 1).unwrap()], 1).unwrap();
            let d = max_diff(
                &logits.i(slot..slot + 1).unwrap(),
                &last_train_logits(&model, &full),
            );
            assert!(d < 1e-4, "{family}: selected row {r} differs by {d}");
        }
    }
}

#[test]
fn truncated_cache_reuses_a_shared_prefix() {
    let cfg = tiny("qwen2");
    let (model, _vm) = model(&cfg, 13);
    let seq = ids(1, 10, cfg.vocab_size, 30);
    let mut cache = model.new_cache();
    model.forward(&seq, &mut cache).unwrap();
    cache.truncate(6).unwrap();
    assert_eq!((cache.len(), cache.positions()), (6, &[6usize][..]));
    let tail = ids(1, 5, cfg.vocab_size, 31);
    let logits = model.forward(&tail, &mut cache).unwrap();
    let full = Tensor::cat(&[&seq.narrow(1, 0, 6).unwrap(), &tail], 1).unwrap();
    assert!(max_diff(&logits, &last_train_logits(&model, &full)) < 1e-4);
    let err = KvCache::stack(vec![model.new_cache()]).unwrap_err();
    assert!(
        err.to_string().contains("cannot stack an empty cache"),
        "{err}"
    );
}

#[test]
fn long_prompts_prefill_in_chunks() {
    let mut cfg = tiny("llama");
    cfg.max_position_embeddings = 2 * PREFILL_CHUNK + 100;
    let (model, _vm) = model(&cfg, 14);
    let t = PREFILL_CHUNK + PREFILL_CHUNK / 2 + 3;
    let seq = ids(1, t, cfg.vocab_size, 40);
    let mut cache = model.new_cache();
    let logits = model.forward(&seq, &mut cache).unwrap();
    assert_eq!(cache.len(), t);
    let d = max_diff(&logits, &last_train_logits(&model, &seq));
    assert!(d < 1e-4, "chunked prefill differs by {d}");
}
