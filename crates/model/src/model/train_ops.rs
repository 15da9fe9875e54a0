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
