//! Differentiable building blocks for the training path.
//!
//! candle's fused `softmax_last_dim`, `rms_norm` and `rope` have no backward pass; these versions
//! are composed from ops that do, so every weight upstream of them receives a gradient.
use candle_core::{D, Result, Tensor};

/// Softmax over the last dimension. The max is detached: the result does not depend on it.
pub fn softmax(xs: &Tensor) -> Result<Tensor> {
    let max = xs.max_keepdim(D::Minus1)?.detach();
    let num = xs.broadcast_sub(&max)?.exp()?;
    let den = num.sum_keepdim(D::Minus1)?;
    num.broadcast_div(&den)
}

/// Log-softmax over the last dimension (detached max, as in [`softmax`]).
pub fn log_softmax(xs: &Tensor) -> Result<Tensor> {
    let max = xs.max_keepdim(D::Minus1)?.detach();
    let shifted = xs.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&lse)
}

/// RMSNorm over the last dimension: `x / sqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(xs: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let mean_sq = xs.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (mean_sq + eps)?.sqrt()?.recip()?;
    xs.broadcast_mul(&inv)?.broadcast_mul(weight)
}

/// Rotary embedding in the rotate-half layout of HF checkpoints.
///
/// `xs` is `(b, heads, t, d)`; `cos` and `sin` are `(t, d/2)`.
pub fn rope(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let d = xs.dim(D::Minus1)?;
    let x1 = xs.narrow(D::Minus1, 0, d / 2)?;
    let x2 = xs.narrow(D::Minus1, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    let cos = Tensor::cat(&[cos, cos], D::Minus1)?;
    let sin = Tensor::cat(&[sin, sin], D::Minus1)?;
    xs.broadcast_mul(&cos)? + rotated.broadcast_mul(&sin)?
}

/// Repeats each key/value head `n_rep` times: `(b, kv, t, d)` to `(b, kv * n_rep, t, d)`.
pub fn repeat_kv(xs: &Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(xs.clone());
    }
    let (b, kv, t, d) = xs.dims4()?;
    Tensor::cat(&vec![xs; n_rep], 2)?.reshape((b, kv * n_rep, t, d))
}

/// Additive causal mask `(t, offset + t)`: 0 where query `i` may see key `j`, -inf elsewhere.
pub fn causal_mask(t: usize, offset: usize, device: &candle_core::Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..offset + t).map(move |j| {
                if j <= i + offset {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_vec(mask, (t, offset + t), device)
}

/// Causal softmax over the last dimension of attention scores `(b, h, t, s)`: query `i` sees
/// keys `0 ..= i + s - t`, the others get probability 0.
///
/// One op with its own backward (`dx = y * (dy - sum(dy * y))`), so training keeps only the
/// scores and the probabilities per layer instead of every intermediate of a composed
/// softmax and mask: attention memory at long prompts drops by more than half.
pub fn causal_softmax(scores: &Tensor) -> Result<Tensor> {
    if !scores.device().is_cpu() || scores.dtype() != candle_core::DType::F32 {
        let (_, _, t, s) = scores.dims4()?;
        let mask = causal_mask(t, s - t, scores.device())?.to_dtype(scores.dtype())?;
        return softmax(&scores.broadcast_add(&mask)?);
    }
    scores.contiguous()?.apply_op1(CausalSoftmax)
}

struct CausalSoftmax;

impl candle_core::CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("causal-softmax needs contiguous scores");
        };
        let x = &storage.as_slice::<f32>()?[start..end];
        let dims = layout.shape().dims();
        let (t, s) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        if s < t {
            candle_core::bail!("causal-softmax: {t} queries over {s} keys");
        }
        let mut y = vec![0f32; x.len()];
        for (row, (xs, ys)) in x.chunks(s).zip(y.chunks_mut(s)).enumerate() {
            let visible = (row % t) + s - t + 1;
            let max = xs[..visible]
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max);
            let mut total = 0f32;
            for (o, &v) in ys[..visible].iter_mut().zip(&xs[..visible]) {
                *o = (v - max).exp();
                total += *o;
            }
            for o in &mut ys[..visible] {
                *o /= total;
            }
        }
        Ok((candle_core::CpuStorage::F32(y), layout.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let dot = (grad * res)?.sum_keepdim(D::Minus1)?;
        Ok(Some((res * grad.broadcast_sub(&dot)?)?))
    }
}

/// Per row of `logits` `(n, vocab)`: the log-probability of that row's target token and the
/// entropy in nats of the row's softmax, as two tensors `(n,)` on the autograd graph.
///
/// On f32 CPU tensors this is one op with its own backward,
/// `dz = g_lp * (onehot(target) - p) - g_h * p * (log p + h)`, with the rows shared out over
/// rayon's threads: training keeps only the logits, where a composed log-softmax, gather and
/// entropy kept about eight vocabulary-sized tensors per scored token and ran them on one
/// thread. Elsewhere it is that composition.
pub fn target_logprob_entropy(logits: &Tensor, targets: &[u32]) -> Result<(Tensor, Tensor)> {
    let (n, vocab) = logits.dims2()?;
    if targets.len() != n {
        candle_core::bail!("{} targets for {n} rows of logits", targets.len());
    }
    if let Some(&t) = targets.iter().find(|&&t| t as usize >= vocab) {
        candle_core::bail!("target token {t} is outside a vocabulary of {vocab}");
    }
    if !logits.device().is_cpu() || logits.dtype() != candle_core::DType::F32 {
        let logp = log_softmax(logits)?;
        let ids = Tensor::from_slice(targets, (n, 1), logits.device())?;
        let lp = logp.gather(&ids, D::Minus1)?.squeeze(1)?;
        let entropy = logp.exp()?.mul(&logp)?.sum(D::Minus1)?.neg()?;
        return Ok((lp, entropy));
    }
    let both = logits.contiguous()?.apply_op1(TargetLogprobEntropy {
        targets: targets.to_vec(),
    })?;
    Ok((
        both.narrow(1, 0, 1)?.squeeze(1)?,
        both.narrow(1, 1, 1)?.squeeze(1)?,
    ))
}

/// Rows per rayon task of [`TargetLogprobEntropy`] and its backward (each row is a whole
/// vocabulary, about 200 KB at SmolLM2's 49,152 tokens).
const LOSS_ROWS_PER_TASK: usize = 4;

/// The contiguous f32 values of a CPU tensor's storage.
fn contiguous_f32<'a>(
    storage: &'a candle_core::CpuStorage,
    layout: &candle_core::Layout,
    what: &str,
) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what} must be contiguous");
    };
    Ok(&storage.as_slice::<f32>()?[start..end])
}

/// Log-sum-exp of a row and `sum(p * z)` under its softmax `p`.
fn row_lse_and_mean(z: &[f32]) -> (f32, f32) {
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (mut total, mut weighted) = (0f32, 0f32);
    for &v in z {
        let e = (v - max).exp();
        total += e;
        weighted += e * v;
    }
    (max + total.ln(), weighted / total)
}

/// See [`target_logprob_entropy`]: `(n, vocab)` logits to `(n, 2)`, each row the target's
/// log-probability and the entropy, `h = lse - sum(p * z)`.
struct TargetLogprobEntropy {
    targets: Vec<u32>,
}

impl candle_core::CustomOp1 for TargetLogprobEntropy {
    fn name(&self) -> &'static str {
        "target-logprob-entropy"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let z = contiguous_f32(storage, layout, "target-logprob-entropy's logits")?;
        let n = self.targets.len();
        let vocab = layout.shape().dims().last().copied().unwrap_or(0);
        let mut out = vec![0f32; 2 * n];
        out.par_chunks_mut(2 * LOSS_ROWS_PER_TASK)
            .zip(z.par_chunks(vocab * LOSS_ROWS_PER_TASK))
            .zip(self.targets.par_chunks(LOSS_ROWS_PER_TASK))
            .for_each(|((out, z), targets)| {
                for ((o, z), &t) in out.chunks_mut(2).zip(z.chunks(vocab)).zip(targets) {
                    let (lse, mean) = row_lse_and_mean(z);
                    o[0] = z[t as usize] - lse;
                    o[1] = lse - mean;
                }
            });
        Ok((candle_core::CpuStorage::F32(out), (n, 2).into()))
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let grad = arg.apply_op3_no_bwd(
            &res.contiguous()?,
            &grad.contiguous()?,
            &TargetLogprobEntropyGrad {
                targets: self.targets.clone(),
            },
        )?;
        Ok(Some(grad))
    }
}

/// The backward of [`TargetLogprobEntropy`]: (logits, its `(n, 2)` result, the result's
/// gradient) to the logits' gradient. The log-sum-exp of each row is recovered from the
/// result (`lse = z[target] - lp`), so no row is reduced twice.
struct TargetLogprobEntropyGrad {
    targets: Vec<u32>,
}

impl candle_core::CustomOp3 for TargetLogprobEntropyGrad {
    fn name(&self) -> &'static str {
        "target-logprob-entropy-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
        s3: &candle_core::CpuStorage,
        l3: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let z = contiguous_f32(s1, l1, "the logits")?;
        let res = contiguous_f32(s2, l2, "the result")?;
        let g = contiguous_f32(s3, l3, "the result's gradient")?;
        let vocab = l1.shape().dims().last().copied().unwrap_or(0);
        let mut dz = vec![0f32; z.len()];
        dz.par_chunks_mut(vocab * LOSS_ROWS_PER_TASK)
            .zip(z.par_chunks(vocab * LOSS_ROWS_PER_TASK))
            .zip(res.par_chunks(2 * LOSS_ROWS_PER_TASK))
            .zip(g.par_chunks(2 * LOSS_ROWS_PER_TASK))
            .zip(self.targets.par_chunks(LOSS_ROWS_PER_TASK))
            .for_each(|((((dz, z), res), g), targets)| {
                let rows = dz.chunks_mut(vocab).zip(z.chunks(vocab));
                let per_row = res.chunks(2).zip(g.chunks(2)).zip(targets);
                for ((dz, z), ((r, g), &t)) in rows.zip(per_row) {
                    let (lp, h) = (r[0], r[1]);
                    let (g_lp, g_h) = (g[0], g[1]);
                    let lse = z[t as usize] - lp;
                    for (d, &v) in dz.iter_mut().zip(z) {
                        let log_p = v - lse;
                        let p = log_p.exp();
                        *d = -g_lp * p - g_h * p * (log_p + h);
                    }
                    dz[t as usize] += g_lp;
                }
            });
        Ok((candle_core::CpuStorage::F32(dz), l1.shape().clone()))
    }
}

/// Rows per rayon task of the fused row ops ([`rms_norm_fused`], [`silu_mul_fused`]): at
/// SmolLM2's widths (576, 1,536) 32 rows are 72-192 KiB, enough work to pay for a task.
const ROWS_PER_TASK: usize = 32;

/// RMSNorm over the last dimension as one op with its own backward, rows shared out over
/// rayon's threads: `y = x * inv * w` with `inv = 1 / sqrt(mean(x^2) + eps)`, and
/// `dx = inv * (g w) - x * inv^3 * mean(g w x)`, `dw = sum over rows of g x inv`. Keeps only
/// `x` for the backward, where [`rms_norm`] kept five intermediates and ran seven ops on one
/// thread. On f32 CPU tensors; elsewhere it is [`rms_norm`].
pub fn rms_norm_fused(xs: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let d = xs.dim(D::Minus1)?;
    if weight.dims() != [d] {
        candle_core::bail!(
            "rms-norm: weight of shape {:?} for rows of {d}",
            weight.dims()
        );
    }
    if !xs.device().is_cpu() || xs.dtype() != candle_core::DType::F32 {
        return rms_norm(xs, weight, eps);
    }
    xs.contiguous()?
        .apply_op2(&weight.contiguous()?, RmsNormOp { eps: eps as f32 })
}

/// The backward of [`rms_norm_fused`] without an autograd graph: `x` its input, `weight`
/// its weight, `grad` its output's gradient (f32 CPU tensors). Returns `(dx, dw)`, `dx`
/// shaped as `x`.
pub(crate) fn rms_norm_fused_backward(
    x: &Tensor,
    weight: &Tensor,
    grad: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let rows = x.elem_count() / weight.elem_count().max(1);
    let both = x.contiguous()?.apply_op3_no_bwd(
        &weight.detach().contiguous()?,
        &grad.contiguous()?,
        &RmsNormGrad { eps: eps as f32 },
    )?;
    let dx = both.narrow(0, 0, rows)?.reshape(x.shape())?;
    let dw = both.narrow(0, rows, 1)?.reshape(weight.shape())?;
    Ok((dx, dw))
}

/// `1 / sqrt(mean(x^2) + eps)` of a row.
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let sum: f32 = x.iter().map(|v| v * v).sum();
    1.0 / (sum / x.len() as f32 + eps).sqrt()
}

struct RmsNormOp {
    eps: f32,
}

impl candle_core::CustomOp2 for RmsNormOp {
    fn name(&self) -> &'static str {
        "rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let x = contiguous_f32(s1, l1, "rms-norm's input")?;
        let w = contiguous_f32(s2, l2, "rms-norm's weight")?;
        let d = w.len();
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(x.par_chunks(d * ROWS_PER_TASK))
            .for_each(|(y, x)| {
                for (y, x) in y.chunks_mut(d).zip(x.chunks(d)) {
                    let inv = inv_rms(x, self.eps);
                    for ((o, &v), &w) in y.iter_mut().zip(x).zip(w) {
                        *o = v * inv * w;
                    }
                }
            });
        Ok((candle_core::CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let rows = x.elem_count() / w.elem_count().max(1);
        // dx's rows, then one more row: dw.
        let both = x.apply_op3_no_bwd(w, &grad.contiguous()?, &RmsNormGrad { eps: self.eps })?;
        let dx = both.narrow(0, 0, rows)?.reshape(x.shape())?;
        let dw = both.narrow(0, rows, 1)?.reshape(w.shape())?;
        Ok((Some(dx), Some(dw)))
    }
}

/// The backward of [`RmsNormOp`]: (x, w, g) to `(rows + 1, d)`, dx's rows then dw.
struct RmsNormGrad {
    eps: f32,
}

impl candle_core::CustomOp3 for RmsNormGrad {
    fn name(&self) -> &'static str {
        "rms-norm-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
        s3: &candle_core::CpuStorage,
        l3: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let x = contiguous_f32(s1, l1, "rms-norm's input")?;
        let w = contiguous_f32(s2, l2, "rms-norm's weight")?;
        let g = contiguous_f32(s3, l3, "rms-norm's output gradient")?;
        let d = w.len();
        let rows = x.len() / d.max(1);
        let mut out = vec![0f32; x.len() + d];
        let (dx, dw) = out.split_at_mut(x.len());
        let partial: Vec<Vec<f32>> = dx
            .par_chunks_mut(d * ROWS_PER_TASK)
            .zip(x.par_chunks(d * ROWS_PER_TASK))
            .zip(g.par_chunks(d * ROWS_PER_TASK))
            .map(|((dx, x), g)| {
                let mut dw = vec![0f32; d];
                for ((dx, x), g) in dx.chunks_mut(d).zip(x.chunks(d)).zip(g.chunks(d)) {
                    let inv = inv_rms(x, self.eps);
                    let mut dot = 0f32;
                    for ((&g, &x), (&w, dw)) in g.iter().zip(x).zip(w.iter().zip(dw.iter_mut())) {
                        dot += g * w * x;
                        *dw += g * x * inv;
                    }
                    let k = inv * inv * inv * dot / d as f32;
                    for (((o, &g), &x), &w) in dx.iter_mut().zip(g).zip(x).zip(w) {
                        *o = inv * g * w - x * k;
                    }
                }
                dw
            })
            .collect();
        for p in partial {
            for (o, v) in dw.iter_mut().zip(p) {
                *o += v;
            }
        }
        Ok((candle_core::CpuStorage::F32(out), (rows + 1, d).into()))
    }
}

/// `silu(gate) * up` as one op with its own backward, shared out over rayon's threads:
/// `dgate = g up s (1 + gate (1 - s))` with `s = sigmoid(gate)`, `dup = g gate s`. Keeps only
/// `gate` and `up` for the backward, where `gate.silu()? * up` also kept `silu(gate)`. On f32
/// CPU tensors of one shape; elsewhere it is that composition.
pub fn silu_mul_fused(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.dims() != up.dims() {
        candle_core::bail!(
            "silu-mul: gate {:?} and up {:?} differ",
            gate.dims(),
            up.dims()
        );
    }
    if !gate.device().is_cpu() || gate.dtype() != candle_core::DType::F32 {
        return gate.silu()? * up;
    }
    gate.contiguous()?.apply_op2(&up.contiguous()?, SiluMul)
}

/// The backward of [`silu_mul_fused`] without an autograd graph: `(dgate, dup)` of `gate`
/// and `up` (f32 CPU tensors of one shape) for the output's gradient `grad`.
pub(crate) fn silu_mul_fused_backward(
    gate: &Tensor,
    up: &Tensor,
    grad: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let both = gate.contiguous()?.apply_op3_no_bwd(
        &up.contiguous()?,
        &grad.contiguous()?,
        &SiluMulGrad,
    )?;
    Ok((both.get(0)?, both.get(1)?))
}

/// Values per rayon task of [`silu_mul_fused`] and its backward.
const VALUES_PER_TASK: usize = 1 << 14;

struct SiluMul;

impl candle_core::CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "silu-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let gate = contiguous_f32(s1, l1, "silu-mul's gate")?;
        let up = contiguous_f32(s2, l2, "silu-mul's up")?;
        let mut y = vec![0f32; gate.len()];
        y.par_chunks_mut(VALUES_PER_TASK)
            .zip(gate.par_chunks(VALUES_PER_TASK))
            .zip(up.par_chunks(VALUES_PER_TASK))
            .for_each(|((y, gate), up)| {
                for ((o, &a), &b) in y.iter_mut().zip(gate).zip(up) {
                    *o = a / (1.0 + (-a).exp()) * b;
                }
            });
        Ok((candle_core::CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // dgate's values, then dup's.
        let both = gate.apply_op3_no_bwd(up, &grad.contiguous()?, &SiluMulGrad)?;
        let dgate = both.get(0)?;
        let dup = both.get(1)?;
        Ok((Some(dgate), Some(dup)))
    }
}

/// The backward of [`SiluMul`]: (gate, up, g) to `(2, shape)`, dgate then dup.
struct SiluMulGrad;

impl candle_core::CustomOp3 for SiluMulGrad {
    fn name(&self) -> &'static str {
        "silu-mul-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
        s3: &candle_core::CpuStorage,
        l3: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let gate = contiguous_f32(s1, l1, "silu-mul's gate")?;
        let up = contiguous_f32(s2, l2, "silu-mul's up")?;
        let g = contiguous_f32(s3, l3, "silu-mul's output gradient")?;
        let mut out = vec![0f32; 2 * gate.len()];
        let (dgate, dup) = out.split_at_mut(gate.len());
        dgate
            .par_chunks_mut(VALUES_PER_TASK)
            .zip(dup.par_chunks_mut(VALUES_PER_TASK))
            .zip(gate.par_chunks(VALUES_PER_TASK))
            .zip(
                up.par_chunks(VALUES_PER_TASK)
                    .zip(g.par_chunks(VALUES_PER_TASK)),
            )
            .for_each(|(((dgate, dup), gate), (up, g))| {
                for ((dga, dub), ((&a, &b), &g)) in dgate
                    .iter_mut()
                    .zip(dup.iter_mut())
                    .zip(gate.iter().zip(up).zip(g))
                {
                    let s = 1.0 / (1.0 + (-a).exp());
                    *dga = g * b * s * (1.0 + a * (1.0 - s));
                    *dub = g * a * s;
                }
            });
        let mut dims = vec![2];
        dims.extend_from_slice(l1.shape().dims());
        Ok((candle_core::CpuStorage::F32(out), dims.into()))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    /// The composed log-softmax, gather and entropy that [`target_logprob_entropy`] replaces.
    fn composed(logits: &Tensor, targets: &[u32]) -> Result<(Tensor, Tensor)> {
        let logp = log_softmax(logits)?;
        let ids = Tensor::from_slice(targets, (targets.len(), 1), logits.device())?;
        let lp = logp.gather(&ids, D::Minus1)?.squeeze(1)?;
        let entropy = logp.exp()?.mul(&logp)?.sum(D::Minus1)?.neg()?;
        Ok((lp, entropy))
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .and_then(|d| d.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>())
            .unwrap_or(f32::INFINITY)
    }

    #[test]
    fn fused_logprob_and_entropy_match_the_composed_ops_forward_and_backward() -> Result<()> {
        let dev = Device::Cpu;
        // 9 rows (more than one rayon task of 4), a vocabulary of 37, logits of spread 3.
        let (n, vocab) = (9, 37);
        let logits = Var::from_tensor(&(Tensor::randn(0f32, 1.0, (n, vocab), &dev)? * 3.0)?)?;
        let targets: Vec<u32> = (0..n as u32).map(|i| (i * 11) % vocab as u32).collect();
        let a = Tensor::randn(0f32, 1.0, n, &dev)?;
        let b = Tensor::randn(0f32, 1.0, n, &dev)?;
        let loss = |(lp, h): (Tensor, Tensor)| -> Result<(Tensor, Tensor, Tensor)> {
            let l = (lp.mul(&a)? + h.mul(&b)?)?.sum_all()?;
            Ok((lp, h, l))
        };
        let (lp0, h0, l0) = loss(composed(logits.as_tensor(), &targets)?)?;
        let (lp1, h1, l1) = loss(target_logprob_entropy(logits.as_tensor(), &targets)?)?;
        assert!(max_abs_diff(&lp0, &lp1) < 1e-5, "log-probs differ");
        assert!(max_abs_diff(&h0, &h1) < 1e-5, "entropies differ");
        let g0 = l0.backward()?.get(&logits).cloned();
        let g1 = l1.backward()?.get(&logits).cloned();
        let (Some(g0), Some(g1)) = (g0, g1) else {
            candle_core::bail!("the logits got no gradient");
        };
        assert!(max_abs_diff(&g0, &g1) < 1e-5, "gradients differ");
        // Not trivially zero: the gradient has as many values as the logits and most are set.
        let nonzero = g1.ne(0f32)?.to_dtype(candle_core::DType::F32)?.sum_all()?;
        assert!(nonzero.to_scalar::<f32>()? > (n * vocab / 2) as f32);
        Ok(())
    }

    /// Gradients of `sum(out * c)` for a fixed random `c`, with respect to each of `vars`.
    fn grads_of(out: &Tensor, c: &Tensor, vars: &[&Var]) -> Result<Vec<Tensor>> {
        let g = out.mul(c)?.sum_all()?.backward()?;
        vars.iter()
            .map(|v| {
                g.get(v)
                    .cloned()
                    .ok_or_else(|| candle_core::Error::Msg("no gradient".into()))
            })
            .collect()
    }

    #[test]
    fn fused_rms_norm_matches_the_composed_ops_forward_and_backward() -> Result<()> {
        let dev = Device::Cpu;
        // 70 rows of 24: more than two rayon tasks of 32 rows, the last one short.
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 35, 24), &dev)?)?;
        let w = Var::from_tensor(&Tensor::randn(1f32, 0.5, 24, &dev)?)?;
        let c = Tensor::randn(0f32, 1.0, (2, 35, 24), &dev)?;
        let y0 = rms_norm(x.as_tensor(), w.as_tensor(), 1e-5)?;
        let y1 = rms_norm_fused(x.as_tensor(), w.as_tensor(), 1e-5)?;
        assert!(max_abs_diff(&y0, &y1) < 1e-5, "outputs differ");
        let g0 = grads_of(&y0, &c, &[&x, &w])?;
        let g1 = grads_of(&y1, &c, &[&x, &w])?;
        assert!(
            max_abs_diff(&g0[0], &g1[0]) < 1e-5,
            "input gradients differ"
        );
        assert!(
            max_abs_diff(&g0[1], &g1[1]) < 1e-4,
            "weight gradients differ"
        );
        assert!(
            max_abs_diff(&g1[1], &g1[1].zeros_like()?) > 0.1,
            "a zero weight gradient"
        );
        Ok(())
    }

    #[test]
    fn fused_silu_mul_matches_the_composed_ops_forward_and_backward() -> Result<()> {
        let dev = Device::Cpu;
        // 3 x 7,000 values: two rayon tasks of 16,384, the last one short.
        let gate = Var::from_tensor(&(Tensor::randn(0f32, 1.0, (3, 7000), &dev)? * 3.0)?)?;
        let up = Var::from_tensor(&Tensor::randn(0f32, 1.0, (3, 7000), &dev)?)?;
        let c = Tensor::randn(0f32, 1.0, (3, 7000), &dev)?;
        let y0 = (gate.as_tensor().silu()? * up.as_tensor())?;
        let y1 = silu_mul_fused(gate.as_tensor(), up.as_tensor())?;
        assert!(max_abs_diff(&y0, &y1) < 1e-5, "outputs differ");
        let g0 = grads_of(&y0, &c, &[&gate, &up])?;
        let g1 = grads_of(&y1, &c, &[&gate, &up])?;
        assert!(max_abs_diff(&g0[0], &g1[0]) < 1e-5, "gate gradients differ");
        assert!(max_abs_diff(&g0[1], &g1[1]) < 1e-5, "up gradients differ");
        Ok(())
    }

    #[test]
    fn fused_row_ops_reject_mismatched_shapes() -> Result<()> {
        let x = Tensor::zeros((2, 5), candle_core::DType::F32, &Device::Cpu)?;
        let w = Tensor::zeros(4, candle_core::DType::F32, &Device::Cpu)?;
        let err = rms_norm_fused(&x, &w, 1e-5).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("rms-norm: weight of shape [4] for rows of 5")));
        let up = Tensor::zeros((5, 2), candle_core::DType::F32, &Device::Cpu)?;
        let err = silu_mul_fused(&x, &up).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("silu-mul: gate [2, 5] and up [5, 2] differ")));
        Ok(())
    }

    #[test]
    fn fused_logprob_rejects_targets_that_do_not_fit_the_logits() -> Result<()> {
        let logits = Tensor::zeros((2, 5), candle_core::DType::F32, &Device::Cpu)?;
        let short = target_logprob_entropy(&logits, &[1]).map(|_| ());
        assert!(short.is_err_and(|e| e.to_string().contains("1 targets for 2 rows of logits")));
        let outside = target_logprob_entropy(&logits, &[1, 5]).map(|_| ());
        assert!(outside.is_err_and(|e| {
            e.to_string()
                .contains("target token 5 is outside a vocabulary of 5")
        }));
        Ok(())
    }
}
