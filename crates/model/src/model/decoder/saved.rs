//! Each decoder layer's own backward ([`super::TrainMemory::Saved`]).
//!
//! The forward runs a layer on the training path's ops without an autograd graph and keeps
//! what the layer's backward reads ([`SavedLayer`]); the backward computes the layer's
//! input gradient and the gradients of its trainable tensors from those with plain tensor
//! ops and the training kernels' own backwards (blockwise attention, fused RMSNorm and
//! SiLU·up), never re-running a projection. Per token and layer it keeps, in f32 values:
//! the layer's input (shared with the layer below's output) and its post-attention
//! residual (`2 hidden`), q, k and v after RoPE, the attention's output and its per-row
//! log-sum-exp (`2 heads·head_dim + 2 kv_heads·head_dim + heads`), gate and up
//! (`2 intermediate`), each adapter's `x Aᵀ` (`rank` per adapted projection), and with q/k
//! norms q and k before them (`heads·head_dim + kv_heads·head_dim`). The normed inputs, the
//! attention output's row layout and `silu(gate)·up` are recomputed (row passes, no
//! matmul).
use candle_core::{Result, Storage, Tensor};

use super::super::kernels::train_attention::{self, AttnDims};
use super::super::linear::{Linear, matmul_sum};
use super::super::train_ops;
use super::{Layer, RmsNorm};

/// What one layer's backward reads (see the module docs).
#[derive(Debug)]
pub(super) struct SavedLayer {
    /// The layer's input `(b, t, hidden)`.
    x: Tensor,
    /// The residual after attention, `x + attention`, `(b, t, hidden)`.
    mid: Tensor,
    /// q and k before their norms `(b, t, heads, d)`, `(b, t, kv_heads, d)`, with q/k norms.
    qk_raw: Option<(Tensor, Tensor)>,
    /// q after RoPE `(b, heads, t, d)`.
    q: Tensor,
    /// k after RoPE `(b, kv_heads, t, d)`.
    k: Tensor,
    /// v `(b, kv_heads, t, d)`.
    v: Tensor,
    /// The attention's output `(b, heads, t, d)`.
    o: Tensor,
    /// Each query row's log-sum-exp `(b, heads, t)`.
    lse: Vec<f32>,
    /// The MLP's gate and up `(b·t, intermediate)`.
    gate: Tensor,
    up: Tensor,
    /// `x Aᵀ` of each projection with an adapter, in [`Layer::linears`] order.
    xa: [Option<Tensor>; 7],
}

/// Runs `f` on the contiguous f32 values of CPU tensors `ts`.
fn with_f32<R>(ts: &[&Tensor], f: impl FnOnce(&[&[f32]]) -> Result<R>) -> Result<R> {
    let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(ts.len());
    for (storage, layout) in &guards {
        let Storage::Cpu(cpu) = &**storage else {
            candle_core::bail!("a layer's own backward runs on the CPU only");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("a layer's own backward needs contiguous tensors");
        };
        slices.push(&cpu.as_slice::<f32>()?[start..end]);
    }
    f(&slices)
}

/// RoPE fused with the head transpose, rows on rayon's threads: `x` `(b, t, heads, d)` to
/// `(b, heads, t, d)` rotated by θ, the values of [`train_ops::rope`] of the transposed `x`
/// bit for bit (`x1 c - x2 s`, `x2 c + x1 s`, each product rounded, then the sum); or, with
/// `inverse`, `x` `(b, heads, t, d)` to `(b, t, heads, d)` rotated by -θ, the transpose of
/// the forward's rotation (its backward). `cos` and `sin` are `(t, d / 2)`.
fn rope_transposed(x: &Tensor, (cos, sin): (&Tensor, &Tensor), inverse: bool) -> Result<Tensor> {
    use rayon::prelude::*;
    let (b, n1, n2, d) = x.dims4()?;
    // Forward: (b, t, heads, d); inverse: (b, heads, t, d).
    let (t, heads) = if inverse { (n2, n1) } else { (n1, n2) };
    let half = d / 2;
    let x = x.contiguous()?;
    let (cos, sin) = (cos.contiguous()?, sin.contiguous()?);
    let out = with_f32(&[&x, &cos, &sin], |s| {
        let (x, cos, sin) = (s[0], s[1], s[2]);
        if cos.len() != t * half || sin.len() != t * half || d % 2 != 0 {
            candle_core::bail!("rope: tables of {} for {t} positions of {d}", cos.len());
        }
        let mut out = vec![0f32; x.len()];
        // One output chunk per (row, head) forward, per (row, position) inverse.
        let chunk = if inverse { heads * d } else { t * d };
        out.par_chunks_mut(chunk).enumerate().for_each(|(i, o)| {
            for (j, o) in o.chunks_mut(d).enumerate() {
                // Forward: chunk (row, head), position j; inverse: chunk (row, position),
                // head j. The source is x[row][a][b] with (a, b) its two middle indices.
                let (row, p, h) = if inverse {
                    (i / t, i % t, j)
                } else {
                    (i / heads, j, i % heads)
                };
                let (a, b) = if inverse { (h, p) } else { (p, h) };
                let src = &x[((row * n1 + a) * n2 + b) * d..][..d];
                let (c, sn) = (&cos[p * half..][..half], &sin[p * half..][..half]);
                let (x1, x2) = src.split_at(half);
                let (o1, o2) = o.split_at_mut(half);
                for k in 0..half {
                    // The inverse rotates by -θ: sin negated.
                    let s = if inverse { -sn[k] } else { sn[k] };
                    o1[k] = x1[k] * c[k] + (-x2[k]) * s;
                    o2[k] = x2[k] * c[k] + x1[k] * s;
                }
            }
        });
        Ok(out)
    })?;
    let shape = if inverse {
        (b, t, heads, d)
    } else {
        (b, heads, t, d)
    };
    Tensor::from_vec(out, shape, x.device())
}

/// [`RmsNorm`]'s training forward on the fused op, without a graph.
fn norm(n: &RmsNorm, xs: &Tensor) -> Result<Tensor> {
    train_ops::rms_norm_fused(xs, &n.weight.detach(), n.eps)
}

/// What a layer's backward differentiates: the base weights, the adapters, and whether the
/// input's gradient is wanted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted {
    pub base: bool,
    pub lora: bool,
    pub dx: bool,
}

impl Layer {
    /// The seven projections, in a fixed order: q, k, v, o, gate, up, down.
    fn linears(&self) -> [&Linear; 7] {
        let (a, m) = (&self.self_attn, &self.mlp);
        [
            &a.q_proj,
            &a.k_proj,
            &a.v_proj,
            &a.o_proj,
            &m.gate_proj,
            &m.up_proj,
            &m.down_proj,
        ]
    }

    fn attn_dims(&self, b: usize, t: usize) -> AttnDims {
        let a = &self.self_attn;
        AttnDims {
            batch: b,
            heads: a.heads,
            kv_heads: a.kv_heads,
            len: t,
            dim: a.head_dim,
        }
    }

    /// The training forward of `x` `(b, t, hidden)` with the same ops (and so the same
    /// values) as [`Layer::forward`] on the fused ops and blockwise attention, without an
    /// autograd graph; returns the output and what [`Layer::backward_saved`] needs.
    pub(super) fn forward_saved(
        &self,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
    ) -> Result<(Tensor, SavedLayer)> {
        let (b, t, hidden) = x.dims3()?;
        let rows = b * t;
        let a = &self.self_attn;
        let (heads, kv_heads, d) = (a.heads, a.kv_heads, a.head_dim);
        let [qp, kp, vp, op, gp, up_p, dp] = self.linears();
        let h1 = norm(&self.input_layernorm, x)?.reshape((rows, hidden))?;
        let (q, xa_q) = qp.forward_saved(&h1)?;
        let (k, xa_k) = kp.forward_saved(&h1)?;
        let (v, xa_v) = vp.forward_saved(&h1)?;
        drop(h1);
        let mut q = q.reshape((b, t, heads, d))?;
        let mut k = k.reshape((b, t, kv_heads, d))?;
        let v = v.reshape((b, t, kv_heads, d))?;
        let mut qk_raw = None;
        if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
            let (q0, k0) = (q, k);
            q = norm(qn, &q0)?;
            k = norm(kn, &k0)?;
            qk_raw = Some((q0, k0));
        }
        let q = rope_transposed(&q, (cos, sin), false)?;
        let k = rope_transposed(&k, (cos, sin), false)?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let scale = (1.0 / (d as f64).sqrt()) as f32;
        let dims = self.attn_dims(b, t);
        let (o, lse) = with_f32(&[&q, &k, &v], |s| {
            train_attention::forward(s[0], s[1], s[2], dims, scale)
        })?;
        let o = Tensor::from_vec(o, (b, heads, t, d), x.device())?;
        let o_rows = o.transpose(1, 2)?.reshape((rows, heads * d))?;
        let (attn, xa_o) = op.forward_saved(&o_rows)?;
        drop(o_rows);
        let mid = (x + attn.reshape((b, t, hidden))?)?;
        drop(attn);
        let h2 = norm(&self.post_attention_layernorm, &mid)?.reshape((rows, hidden))?;
        let (gate, xa_g) = gp.forward_saved(&h2)?;
        let (up, xa_u) = up_p.forward_saved(&h2)?;
        drop(h2);
        let act = train_ops::silu_mul_fused(&gate, &up)?;
        let (down, xa_d) = dp.forward_saved(&act)?;
        drop(act);
        let out = (&mid + down.reshape((b, t, hidden))?)?;
        let saved = SavedLayer {
            x: x.clone(),
            mid,
            qk_raw,
            q,
            k,
            v,
            o,
            lse,
            gate,
            up,
            xa: [xa_q, xa_k, xa_v, xa_o, xa_g, xa_u, xa_d],
        };
        Ok((out, saved))
    }

    /// The backward of [`Layer::forward_saved`] for the output's gradient `dy`
    /// `(b, t, hidden)`: pushes `(variable, gradient)` for every trainable tensor `want`
    /// asks for onto `grads` and returns the input's gradient when `want.dx`.
    pub(super) fn backward_saved(
        &self,
        saved: SavedLayer,
        dy: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        want: Wanted,
        grads: &mut Vec<(Tensor, Tensor)>,
    ) -> Result<Option<Tensor>> {
        let SavedLayer {
            x,
            mid,
            qk_raw,
            q,
            k,
            v,
            o,
            lse,
            gate,
            up,
            xa,
        } = saved;
        let (b, t, hidden) = x.dims3()?;
        let rows = b * t;
        let a = &self.self_attn;
        let (heads, kv_heads, d) = (a.heads, a.kv_heads, a.head_dim);
        let [qp, kp, vp, op, gp, up_p, dp] = self.linears();
        let [xa_q, xa_k, xa_v, xa_o, xa_g, xa_u, xa_d] = xa;
        let flags = |dx: bool| (want.base, want.lora, dx);
        let dy2 = dy.reshape((rows, hidden))?.contiguous()?;

        // The MLP: out = mid + down(silu(gate) · up), gate and up of norm(mid).
        let act = train_ops::silu_mul_fused(&gate, &up)?;
        let mut dx = Vec::new();
        dp.backward_saved(&act, xa_d.as_ref(), &dy2, flags(true), grads, &mut dx)?;
        drop(act);
        let d_act = matmul_sum(&std::mem::take(&mut dx))?;
        let (d_gate, d_up) = train_ops::silu_mul_fused_backward(&gate, &up, &d_act)?;
        drop((d_act, gate, up));
        let h2 = norm(&self.post_attention_layernorm, &mid)?.reshape((rows, hidden))?;
        gp.backward_saved(&h2, xa_g.as_ref(), &d_gate, flags(true), grads, &mut dx)?;
        up_p.backward_saved(&h2, xa_u.as_ref(), &d_up, flags(true), grads, &mut dx)?;
        drop((h2, d_gate, d_up));
        let dh2 = matmul_sum(&std::mem::take(&mut dx))?;
        let post = &self.post_attention_layernorm;
        let (d_mid, dw_post) = train_ops::rms_norm_fused_backward(
            &mid.reshape((rows, hidden))?,
            &post.weight,
            &dh2,
            post.eps,
        )?;
        drop((dh2, mid));
        if want.base {
            grads.push((post.weight.clone(), dw_post));
        }
        let d_mid = (d_mid + &dy2)?;

        // Attention: mid = x + o_proj(attention(rope(q), rope(k), v)), q/k/v of norm(x).
        let o_rows = o.transpose(1, 2)?.reshape((rows, heads * d))?;
        op.backward_saved(&o_rows, xa_o.as_ref(), &d_mid, flags(true), grads, &mut dx)?;
        drop(o_rows);
        let d_o = matmul_sum(&std::mem::take(&mut dx))?;
        let d_o = d_o
            .reshape((b, t, heads, d))?
            .transpose(1, 2)?
            .contiguous()?;
        let scale = (1.0 / (d as f64).sqrt()) as f32;
        let dims = self.attn_dims(b, t);
        let (dq, dk, dv) = with_f32(&[&q, &k, &v, &o, &d_o], |s| {
            let saved = train_attention::Saved {
                q: s[0],
                k: s[1],
                v: s[2],
                o: s[3],
                g: s[4],
                lse: &lse,
            };
            train_attention::backward(&saved, dims, scale)
        })?;
        drop((q, k, v, o, d_o, lse));
        let dev = x.device();
        // RoPE is a rotation by θ per pair; its transpose rotates by -θ.
        let dq = Tensor::from_vec(dq, (b, heads, t, d), dev)?;
        let dk = Tensor::from_vec(dk, (b, kv_heads, t, d), dev)?;
        let dv = Tensor::from_vec(dv, (b, kv_heads, t, d), dev)?;
        let dq = rope_transposed(&dq, (cos, sin), true)?;
        let dk = rope_transposed(&dk, (cos, sin), true)?;
        let dv = dv.transpose(1, 2)?;
        let (dq, dk) = match (&a.q_norm, &a.k_norm, qk_raw) {
            (Some(qn), Some(kn), Some((q0, k0))) => {
                let (dq, dwq) = train_ops::rms_norm_fused_backward(&q0, &qn.weight, &dq, qn.eps)?;
                let (dk, dwk) = train_ops::rms_norm_fused_backward(&k0, &kn.weight, &dk, kn.eps)?;
                if want.base {
                    grads.push((qn.weight.clone(), dwq));
                    grads.push((kn.weight.clone(), dwk));
                }
                (dq, dk)
            }
            _ => (dq, dk),
        };
        let dq = dq.contiguous()?.reshape((rows, heads * d))?;
        let dk = dk.contiguous()?.reshape((rows, kv_heads * d))?;
        let dv = dv.contiguous()?.reshape((rows, kv_heads * d))?;
        let x2 = x.reshape((rows, hidden))?;
        let input = &self.input_layernorm;
        let h1 = norm(input, &x2)?;
        // The input norm's weight needs dh1 as much as the input does.
        let need = want.dx || want.base;
        qp.backward_saved(&h1, xa_q.as_ref(), &dq, flags(need), grads, &mut dx)?;
        kp.backward_saved(&h1, xa_k.as_ref(), &dk, flags(need), grads, &mut dx)?;
        vp.backward_saved(&h1, xa_v.as_ref(), &dv, flags(need), grads, &mut dx)?;
        drop((h1, dq, dk, dv));
        if !need {
            return Ok(None);
        }
        let dh1 = matmul_sum(&dx)?;
        drop(dx);
        let (dx, dw_in) = train_ops::rms_norm_fused_backward(&x2, &input.weight, &dh1, input.eps)?;
        if want.base {
            grads.push((input.weight.clone(), dw_in));
        }
        if !want.dx {
            return Ok(None);
        }
        Ok(Some((dx + d_mid)?.reshape((b, t, hidden))?))
    }
}

#[cfg(test)]
// A row's spans are a list of ranges; one range is a list of one, not a range of numbers.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use std::collections::BTreeMap;

    use candle_core::backprop::GradStore;
    use candle_core::{Device, Tensor, Var};

    use crate::logprob::{Spans, span_logprobs_and_entropy_for_update};
    use crate::model::{
        Decoder, LoraConfig, ModelConfig, TrainAttention, TrainMemory, TrainOps, lora,
    };

    /// The tiny config of `family`, Qwen3 with a head dim other than hidden / heads (as the
    /// integration tests build them).
    fn tiny(family: &str) -> ModelConfig {
        let mut cfg = ModelConfig::tiny(family);
        if family == "qwen3" {
            cfg.head_dim = Some(16);
        }
        cfg
    }

    fn max_abs(t: &Tensor) -> f32 {
        t.abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        max_abs(&(a - b).unwrap())
    }

    /// Every variable's gradient of the summed log-probabilities and half the summed
    /// entropies of `rows`, taken as an update takes them with `model`'s [`TrainMemory`]:
    /// the loss's own backward, then [`Decoder::backward_layers`] where there are
    /// checkpoints, each variable's parts summed.
    fn update_gradients(
        model: &Decoder,
        vars: &[(String, Var)],
        rows: &[Spans],
    ) -> (f32, BTreeMap<String, Tensor>) {
        let (lp, entropy, ck) = span_logprobs_and_entropy_for_update(model, rows).unwrap();
        let loss = (lp.sum_all().unwrap() + (entropy.sum_all().unwrap() * 0.5).unwrap()).unwrap();
        let mut sums: BTreeMap<String, Tensor> = BTreeMap::new();
        let mut add = |g: &GradStore| {
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
    fn saved_layers_are_checkpointed_layers_off_the_ops_they_are_written_for() {
        // Composed ops or plain attention: the layers run again in the backward, as
        // checkpointed layers do, and the gradients are still the kept graph's.
        let cfg = tiny("qwen3");
        let (model, varmap) = Decoder::random(&cfg, 3, 0.2, &Device::Cpu).unwrap();
        let vars: Vec<(String, Var)> = varmap.data().lock().unwrap().clone().into_iter().collect();
        let rows = [Spans {
            prompt: &[5, 6, 7],
            completion: &[8, 9, 10, 11],
            spans: &[0..4],
        }];
        for (ops, attention) in [
            (TrainOps::Composed, TrainAttention::Blockwise),
            (TrainOps::Fused, TrainAttention::Plain),
        ] {
            let mut model = model.clone();
            model.set_train_ops(ops);
            model.set_train_attention(attention);
            model.set_train_memory(TrainMemory::Kept);
            let (kept_loss, kept) = update_gradients(&model, &vars, &rows);
            model.set_train_memory(TrainMemory::Saved);
            assert!(!model.saves_layers());
            let (loss, grads) = update_gradients(&model, &vars, &rows);
            assert_eq!(kept_loss, loss, "{ops:?}, {attention:?}");
            assert_eq!(kept.len(), grads.len(), "{ops:?}, {attention:?}");
            for (name, k) in &kept {
                let diff = max_diff(k, &grads[name]);
                assert!(diff <= 1e-5 * max_abs(k).max(1e-3), "{name}: {diff}");
            }
        }
    }

    #[test]
    fn each_layers_own_backward_gives_the_kept_graphs_loss_and_gradients() {
        // Three rows of different lengths (two right-padded), one with two scored spans; 70
        // positions in the longest, past one attention block. Full fine-tuning (every
        // weight, biases with Qwen2, q/k norms with Qwen3, the tied embedding reached
        // through the head and the input) and LoRA adapters.
        let long: Vec<u32> = (0..60).map(|i| (i * 7 % 50) as u32 + 3).collect();
        let spans_a = [0..4, 6..10];
        let spans_b = [0..long.len()];
        let spans_c = [0..3];
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
        for family in ["llama", "qwen2", "qwen3"] {
            let cfg = tiny(family);
            for lora_rank in [None, Some(4)] {
                let (mut model, varmap) = Decoder::random(&cfg, 13, 0.2, &Device::Cpu).unwrap();
                let vars: Vec<(String, Var)> = match lora_rank {
                    None => varmap.data().lock().unwrap().clone().into_iter().collect(),
                    Some(r) => {
                        let lcfg = LoraConfig {
                            r,
                            lora_alpha: 8.0,
                            ..LoraConfig::default()
                        };
                        let adapters = lora::attach_new(&mut model, &lcfg, 5).unwrap();
                        let vars: Vec<(String, Var)> = adapters
                            .data()
                            .lock()
                            .unwrap()
                            .clone()
                            .into_iter()
                            .collect();
                        // Fresh adapters have B = 0, which would leave A without a gradient.
                        for (name, var) in vars.iter().filter(|(n, _)| n.contains("lora_B")) {
                            let fill: Vec<f32> = (0..var.elem_count())
                                .map(|i| ((i * 37 + name.len()) as f32).sin() * 0.1)
                                .collect();
                            var.set(&Tensor::from_vec(fill, var.shape(), &Device::Cpu).unwrap())
                                .unwrap();
                        }
                        vars
                    }
                };
                model.set_train_memory(TrainMemory::Kept);
                let (kept_loss, kept) = update_gradients(&model, &vars, &rows);
                model.set_train_memory(TrainMemory::Saved);
                let (saved_loss, saved) = update_gradients(&model, &vars, &rows);
                let what = format!("{family}, LoRA {lora_rank:?}");
                assert_eq!(
                    kept_loss.to_bits(),
                    saved_loss.to_bits(),
                    "{what}: the loss"
                );
                assert_eq!(kept.len(), vars.len(), "{what}: a variable has no gradient");
                assert_eq!(
                    kept.keys().collect::<Vec<_>>(),
                    saved.keys().collect::<Vec<_>>(),
                    "{what}"
                );
                for (name, k) in &kept {
                    let s = &saved[name];
                    assert_eq!(k.dims(), s.dims(), "{what}: {name}");
                    let size = max_abs(k);
                    assert!(size > 0.0, "{what}: the gradient of {name} is 0");
                    assert!(
                        max_abs(s) > 0.0,
                        "{what}: the saved gradient of {name} is 0"
                    );
                    let diff = max_diff(k, s);
                    assert!(
                        diff <= 1e-5 * size.max(1e-3),
                        "{what}: gradient of {name} differs by {diff} (size {size})"
                    );
                }
            }
        }
    }
}
