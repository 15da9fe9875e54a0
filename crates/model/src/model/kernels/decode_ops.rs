//! The inference path's element-wise ops on the CPU: RMSNorm, RoPE and SiLU·up, with exactly
//! the arithmetic of candle's CPU kernels, and without rayon for the inputs of a decode step.
//!
//! candle's `rms_norm` and `rope` share their rows out through rayon. Called from a thread
//! outside rayon's pool (the sampler's), every such call injects a job and blocks on a latch
//! until a pool thread, woken from sleep, has run it: tens of microseconds in a virtual
//! machine, for a few hundred nanoseconds of arithmetic. A decode step of SmolLM2 made 60 of
//! these calls, and the decode pool's helper spun through them. Here a small input runs on
//! the calling thread and only a large one (prefill) on rayon. Each row is
//! computed by the same expressions in the same order as candle's kernels, so the results
//! are bit for bit candle's, whichever thread computes them. Other devices and dtypes go to
//! candle's own ops.
use candle_core::{CpuStorage, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Inputs with at least this many values are split across rayon's threads.
const PARALLEL_MIN: usize = 1 << 15;

/// RMSNorm over the last dimension: `x / sqrt(mean(x^2) + eps) * weight`, as candle's
/// `candle_nn::ops::rms_norm`.
pub fn rms_norm(xs: &Tensor, weight: &Tensor, eps: f32) -> Result<Tensor> {
    if !on_cpu_f32(&[xs, weight]) {
        return candle_nn::ops::rms_norm(&xs.contiguous()?, weight, eps);
    }
    let dim = xs.dim(candle_core::D::Minus1)?;
    if weight.dims1()? != dim {
        candle_core::bail!(
            "shape mismatch in rms-norm {:?} {:?}",
            xs.shape(),
            weight.shape()
        );
    }
    xs.contiguous()?
        .apply_op2_no_bwd(&weight.contiguous()?, &RmsNorm { eps })
}

/// Rotary embedding in the rotate-half layout, as candle's `candle_nn::rotary_emb::rope`:
/// `xs` is `(b, heads, t, d)`; `cos` and `sin` are `(t, d/2)`, or `(b, t, d/2)` for rows at
/// different positions.
pub fn rope(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    if !on_cpu_f32(&[xs, cos, sin]) {
        return candle_nn::rotary_emb::rope(xs, cos, sin);
    }
    let (b, _, t, d) = xs.dims4()?;
    if !d.is_multiple_of(2) {
        candle_core::bail!("rope needs an even head dimension, got {d}");
    }
    let table = match cos.dims() {
        [ct, half] => *ct == t && *half == d / 2,
        [cb, ct, half] => *cb == b && *ct == t && *half == d / 2,
        _ => false,
    };
    if !table || cos.dims() != sin.dims() {
        candle_core::bail!(
            "rope tables {:?} and {:?} do not fit an input of {:?}",
            cos.shape(),
            sin.shape(),
            xs.shape()
        );
    }
    xs.contiguous()?
        .apply_op3_no_bwd(&cos.contiguous()?, &sin.contiguous()?, &Rope)
}

/// `silu(gate) * up`, element by element: candle's `gate.silu()? * up` in one pass.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if !on_cpu_f32(&[gate, up]) {
        return gate.silu()? * up;
    }
    if gate.shape() != up.shape() {
        candle_core::bail!("silu-mul of {:?} and {:?}", gate.shape(), up.shape());
    }
    gate.contiguous()?
        .apply_op2_no_bwd(&up.contiguous()?, &SiluMul)
}

fn on_cpu_f32(xs: &[&Tensor]) -> bool {
    xs.iter()
        .all(|x| x.device().is_cpu() && x.dtype() == DType::F32)
}

/// The values of a contiguous f32 tensor.
fn values<'a>(storage: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what} has to be contiguous");
    };
    Ok(&storage.as_slice::<f32>()?[start..end])
}

/// Runs `f(row_index, row)` for every row of `row_len` values of `dst`: on this thread when
/// `dst` is small (every decode step), else on rayon, as candle did. Large inputs come from
/// prefill, whose f32 GEMMs keep rayon's threads awake; the decode pool's helpers would spin
/// after the job and take cores from those GEMMs (measured: prefill 15% slower).
fn for_each_row(dst: &mut [f32], row_len: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if row_len == 0 {
        return;
    }
    if dst.len() < PARALLEL_MIN {
        for (i, row) in dst.chunks_mut(row_len).enumerate() {
            f(i, row);
        }
        return;
    }
    dst.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(i, row)| f(i, row));
}

struct RmsNorm {
    eps: f32,
}

impl candle_core::CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "infer-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let src = values(s1, l1, "rms-norm input")?;
        let alpha = values(s2, l2, "rms-norm weight")?;
        let dim = alpha.len();
        let mut dst = vec![0f32; src.len()];
        for_each_row(&mut dst, dim, |i, dst| {
            let src = &src[i * dim..(i + 1) * dim];
            // candle's expressions, in candle's order.
            let sum2 = src.iter().map(|&v| v * v).sum::<f32>();
            let m = (sum2 / dim as f32 + self.eps).sqrt();
            for ((d, s), alpha) in dst.iter_mut().zip(src).zip(alpha) {
                *d = *s / m * *alpha
            }
        });
        Ok((CpuStorage::F32(dst), l1.shape().clone()))
    }
}

struct Rope;

impl candle_core::CustomOp3 for Rope {
    fn name(&self) -> &'static str {
        "infer-rope"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let src = values(s1, l1, "rope input")?;
        let cos = values(s2, l2, "rope cos")?;
        let sin = values(s3, l3, "rope sin")?;
        let (_, h, t, d) = l1.shape().dims4()?;
        let per_row = l2.dims().len() == 3;
        let half = d / 2;
        let mut dst = vec![0f32; src.len()];
        for_each_row(&mut dst, t * d, |bh, dst| {
            let src = &src[bh * t * d..(bh + 1) * t * d];
            let table = if per_row { (bh / h) * t * half } else { 0 };
            for i_t in 0..t {
                for i_d in 0..half {
                    let i1 = i_t * d + i_d;
                    let i2 = i1 + half;
                    let i_cs = table + i_t * half + i_d;
                    dst[i1] = src[i1] * cos[i_cs] - src[i2] * sin[i_cs];
                    dst[i2] = src[i1] * sin[i_cs] + src[i2] * cos[i_cs];
                }
            }
        });
        Ok((CpuStorage::F32(dst), l1.shape().clone()))
    }
}

struct SiluMul;

impl candle_core::CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "infer-silu-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let gate = values(s1, l1, "silu-mul gate")?;
        let up = values(s2, l2, "silu-mul up")?;
        let row = *l1.dims().last().unwrap_or(&0);
        let mut dst = vec![0f32; gate.len()];
        for_each_row(&mut dst, row, |i, dst| {
            let (gate, up) = (&gate[i * row..(i + 1) * row], &up[i * row..(i + 1) * row]);
            for ((d, &g), &u) in dst.iter_mut().zip(gate).zip(up) {
                // candle's silu (`v / (1 + exp(-v))`), then its product.
                *d = (g / (1.0 + (-g).exp())) * u;
            }
        });
        Ok((CpuStorage::F32(dst), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Values spread over many binades, with both signs, from a fixed seed.
    fn spread(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                let e = ((s >> 20) & 15) as i32 - 8;
                (u - 0.5) * 2f32.powi(e)
            })
            .collect()
    }

    fn tensor(shape: &[usize], seed: u64) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(spread(n, seed), shape, &Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn rms_norm_gives_candles_bits_small_and_split() {
        // 3 rows run on the caller; 70 rows of 576 (40,320 values) are split across rayon.
        for rows in [1, 3, 70] {
            let x = tensor(&[rows, 576], rows as u64);
            let w = tensor(&[576], 99);
            let ours = rms_norm(&x, &w, 1e-5).unwrap();
            let theirs = candle_nn::ops::rms_norm(&x, &w, 1e-5).unwrap();
            assert_eq!(ours.dims(), theirs.dims());
            assert_eq!(bits(&ours), bits(&theirs), "{rows} rows");
        }
    }

    #[test]
    fn rope_gives_candles_bits_for_shared_and_per_row_tables() {
        for (b, h, t) in [(1, 9, 1), (2, 3, 5), (4, 9, 40)] {
            let x = tensor(&[b, h, t, 64], (b * h * t) as u64);
            for table in [vec![t, 32], vec![b, t, 32]] {
                let cos = tensor(&table, 7);
                let sin = tensor(&table, 8);
                let ours = rope(&x, &cos, &sin).unwrap();
                let theirs = candle_nn::rotary_emb::rope(&x, &cos, &sin).unwrap();
                assert_eq!(bits(&ours), bits(&theirs), "({b}, {h}, {t}) with {table:?}");
            }
        }
    }

    #[test]
    fn silu_mul_gives_candles_bits() {
        for rows in [1, 30] {
            let g = tensor(&[rows, 1536], 1 + rows as u64);
            let u = tensor(&[rows, 1536], 2 + rows as u64);
            let ours = silu_mul(&g, &u).unwrap();
            let theirs = (g.silu().unwrap() * &u).unwrap();
            assert_eq!(bits(&ours), bits(&theirs), "{rows} rows");
        }
    }

    #[test]
    fn bad_shapes_are_errors_with_their_shapes() {
        let x = tensor(&[1, 9, 1, 64], 1);
        let err = rope(&x, &tensor(&[2, 32], 2), &tensor(&[2, 32], 3)).unwrap_err();
        assert!(
            err.to_string()
                .contains("do not fit an input of [1, 9, 1, 64]"),
            "{err}"
        );
        let err = rms_norm(&tensor(&[2, 8], 1), &tensor(&[7], 2), 1e-5).unwrap_err();
        assert!(
            err.to_string().contains("shape mismatch in rms-norm"),
            "{err}"
        );
        let err = silu_mul(&tensor(&[2, 8], 1), &tensor(&[2, 7], 2)).unwrap_err();
        assert!(
            err.to_string().contains("silu-mul of [2, 8] and [2, 7]"),
            "{err}"
        );
    }
}
