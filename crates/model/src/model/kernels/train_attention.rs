//! Causal attention for the training path, computed block by block (FlashAttention-2).
//!
//! The plain training path computes `causal_softmax(q kᵀ) v` with every head's full `t x t`
//! score matrix, and keeps the scores and the probabilities for the backward pass: at 512
//! tokens that is 1 MiB per head per row per layer, twice, and it grows with the square of
//! the length. It also repeats each key/value head for the query heads that share it.
//!
//! This op computes the same function in blocks of [`BLOCK`] queries by [`BLOCK`] keys with
//! an online softmax, and keeps only each query row's log-sum-exp (`t` values per head) next
//! to its output: memory grows linearly with the length. Query head `h` reads key/value head
//! `h / (heads / kv_heads)` in place; nothing is repeated. The backward pass recomputes the
//! probabilities block by block from the log-sum-exp.
//!
//! Causality handles right padding: a padded position comes after every real position of its
//! row, so no real query ever sees a padded key.
//!
//! The block products run on `gemm` (the kernel candle's own matmul uses), one thread each;
//! the work is spread over rayon's pool, one task per (row, query head) in the forward pass
//! and per (row, key/value head) in the backward pass, which owns the key and value
//! gradients of its group.
use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor};
use rayon::prelude::*;

/// Queries (and keys) per block.
pub const BLOCK: usize = 64;

/// The sizes of one attention: `q` is `(batch, heads, len, dim)`, `k` and `v` are
/// `(batch, kv_heads, len, dim)`, all contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDims {
    /// Rows in the batch.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; divides `heads`.
    pub kv_heads: usize,
    /// Positions per row (queries and keys alike).
    pub len: usize,
    /// Values per head.
    pub dim: usize,
}

impl AttnDims {
    fn check(&self, q: usize, kv: usize) -> Result<()> {
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            candle_core::bail!(
                "blockwise attention: {} query heads over {} key/value heads",
                self.heads,
                self.kv_heads
            );
        }
        let per_head = self.batch * self.len * self.dim;
        if q != per_head * self.heads || kv != per_head * self.kv_heads {
            candle_core::bail!(
                "blockwise attention: {q} query and {kv} key values do not fit {self:?}"
            );
        }
        Ok(())
    }

    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// `dst (m x n) = beta * lhs (m x k) · rhs (k x n)`, plus `dst` when `acc`; every operand
/// given by its row and column strides. Single-threaded.
fn gemm(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs, acc): (&mut [f32], usize, bool),
    (lhs, lhs_rs, lhs_cs): (&[f32], usize, usize),
    (rhs, rhs_rs, rhs_cs): (&[f32], usize, usize),
    beta: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(dst.len() > last(m, dst_rs, n, 1), "gemm: dst too short");
    if k > 0 {
        assert!(
            lhs.len() > last(m, lhs_rs, k, lhs_cs),
            "gemm: lhs too short"
        );
        assert!(
            rhs.len() > last(k, rhs_rs, n, rhs_cs),
            "gemm: rhs too short"
        );
    }
    // SAFETY: the asserts above keep every element the product reads or writes inside its
    // slice; `dst` is borrowed mutably, so it aliases neither operand.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            acc,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            1.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Keys of block `c0 .. c0 + bc` that query `r` sees (causal): the first so many.
fn visible(r: usize, c0: usize, bc: usize) -> usize {
    (r + 1).saturating_sub(c0).min(bc)
}

/// The forward pass: returns the output `(batch, heads, len, dim)` and each query row's
/// log-sum-exp of its scaled scores `(batch, heads, len)`.
pub fn forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: AttnDims,
    scale: f32,
) -> Result<(Vec<f32>, Vec<f32>)> {
    dims.check(q.len(), k.len().max(v.len()))?;
    let AttnDims {
        heads,
        len: t,
        dim: d,
        ..
    } = dims;
    let mut out = vec![0f32; q.len()];
    let mut lse = vec![0f32; dims.batch * heads * t];
    if t == 0 || d == 0 {
        return Ok((out, lse));
    }
    let group = dims.group();
    out.par_chunks_mut(t * d)
        .zip(lse.par_chunks_mut(t))
        .enumerate()
        .for_each(|(bh, (o, l))| {
            let (row, h) = (bh / heads, bh % heads);
            let kv = (row * dims.kv_heads + h / group) * t * d;
            let head = Head {
                q: &q[bh * t * d..][..t * d],
                k: &k[kv..][..t * d],
                v: &v[kv..][..t * d],
                t,
                d,
                scale,
            };
            forward_head(&head, o, l);
        });
    Ok((out, lse))
}

/// One query head of one row and its key/value head: each `(t, d)`.
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    t: usize,
    d: usize,
    scale: f32,
}

/// Writes `out` `(t, d)` and `lse` `(t)` of one head, a block of queries at a time.
fn forward_head(hd: &Head, out: &mut [f32], lse: &mut [f32]) {
    let (t, d) = (hd.t, hd.d);
    let mut s = vec![0f32; BLOCK * BLOCK];
    let mut max = [0f32; BLOCK];
    let mut total = [0f32; BLOCK];
    for r0 in (0..t).step_by(BLOCK) {
        let br = BLOCK.min(t - r0);
        let o = &mut out[r0 * d..(r0 + br) * d];
        max[..br].fill(f32::NEG_INFINITY);
        total[..br].fill(0.0);
        // Key blocks up to and including the diagonal one; the first holds key 0, which
        // every query sees, so each row's max is finite from then on.
        for c0 in (0..r0 + br).step_by(BLOCK) {
            let bc = BLOCK.min(t - c0);
            gemm(
                (br, bc, d),
                (&mut s, bc, false),
                (&hd.q[r0 * d..], d, 1),
                (&hd.k[c0 * d..], 1, d),
                hd.scale,
            );
            for i in 0..br {
                let seen = visible(r0 + i, c0, bc);
                let row = &mut s[i * bc..(i + 1) * bc];
                let block_max = row[..seen]
                    .iter()
                    .copied()
                    .fold(f32::NEG_INFINITY, f32::max);
                let new_max = max[i].max(block_max);
                let rescale = (max[i] - new_max).exp();
                let mut sum = 0f32;
                for x in &mut row[..seen] {
                    *x = (*x - new_max).exp();
                    sum += *x;
                }
                // Keys after the query get probability 0.
                row[seen..].fill(0.0);
                total[i] = total[i] * rescale + sum;
                max[i] = new_max;
                if rescale != 1.0 {
                    for x in &mut o[i * d..(i + 1) * d] {
                        *x *= rescale;
                    }
                }
            }
            gemm(
                (br, d, bc),
                (o, d, true),
                (&s, bc, 1),
                (&hd.v[c0 * d..], d, 1),
                1.0,
            );
        }
        for i in 0..br {
            let inv = 1.0 / total[i];
            for x in &mut o[i * d..(i + 1) * d] {
                *x *= inv;
            }
            lse[r0 + i] = max[i] + total[i].ln();
        }
    }
}

/// What the backward pass reads: the inputs of [`forward`], its output `o`, the output's
/// gradient `g` (both shaped as `q`) and the log-sum-exp `lse` it returned.
pub struct Saved<'a> {
    /// `(batch, heads, len, dim)`.
    pub q: &'a [f32],
    /// `(batch, kv_heads, len, dim)`.
    pub k: &'a [f32],
    /// `(batch, kv_heads, len, dim)`.
    pub v: &'a [f32],
    /// The output, `(batch, heads, len, dim)`.
    pub o: &'a [f32],
    /// The output's gradient, `(batch, heads, len, dim)`.
    pub g: &'a [f32],
    /// `(batch, heads, len)`.
    pub lse: &'a [f32],
}

/// The gradients of [`forward`]'s inputs: `(dq, dk, dv)` shaped as `q`, `k`, `v`.
pub fn backward(
    saved: &Saved,
    dims: AttnDims,
    scale: f32,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let Saved { q, k, v, o, g, lse } = *saved;
    dims.check(q.len(), k.len().max(v.len()))?;
    if o.len() != q.len() || g.len() != q.len() || lse.len() * dims.dim != q.len() {
        candle_core::bail!("blockwise attention: saved tensors do not fit {dims:?}");
    }
    let AttnDims { len: t, dim: d, .. } = dims;
    let mut dq = vec![0f32; q.len()];
    let mut dk = vec![0f32; k.len()];
    let mut dv = vec![0f32; v.len()];
    if t == 0 || d == 0 {
        return Ok((dq, dk, dv));
    }
    // delta = rowsum(dO ∘ O): the softmax backward's per-row term.
    let delta: Vec<f32> = o
        .par_chunks(d)
        .zip(g.par_chunks(d))
        .map(|(o, g)| o.iter().zip(g).map(|(a, b)| a * b).sum())
        .collect();
    let group = dims.group();
    let span = group * t * d;
    dq.par_chunks_mut(span)
        .zip(dk.par_chunks_mut(t * d))
        .zip(dv.par_chunks_mut(t * d))
        .enumerate()
        .for_each(|(bg, ((dq, dk), dv))| {
            let heads = Group {
                q: &q[bg * span..][..span],
                g: &g[bg * span..][..span],
                lse: &lse[bg * group * t..][..group * t],
                delta: &delta[bg * group * t..][..group * t],
                heads: group,
            };
            let kv = Head {
                q: &[],
                k: &k[bg * t * d..][..t * d],
                v: &v[bg * t * d..][..t * d],
                t,
                d,
                scale,
            };
            backward_group(&heads, &kv, (dq, dk, dv));
        });
    Ok((dq, dk, dv))
}

/// The query heads of one row that share a key/value head: `q` and `g` are
/// `(heads, t, d)`, `lse` and `delta` `(heads, t)`.
struct Group<'a> {
    q: &'a [f32],
    g: &'a [f32],
    lse: &'a [f32],
    delta: &'a [f32],
    heads: usize,
}

/// FlashAttention-2's backward for one group and its key/value head `kv`: for each key
/// block, every query block that sees it, for each query head of the group. The task owns
/// the group's `dq` `(heads, t, d)` and the key/value head's `dk` and `dv` `(t, d)`.
fn backward_group(grp: &Group, kv: &Head, (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32])) {
    let (t, d, scale) = (kv.t, kv.d, kv.scale);
    let mut p = vec![0f32; BLOCK * BLOCK];
    let mut ds = vec![0f32; BLOCK * BLOCK];
    for c0 in (0..t).step_by(BLOCK) {
        let bc = BLOCK.min(t - c0);
        let (kb, vb) = (&kv.k[c0 * d..], &kv.v[c0 * d..]);
        // Query blocks from the diagonal one on see this key block.
        for r0 in (c0..t).step_by(BLOCK) {
            let br = BLOCK.min(t - r0);
            for h in 0..grp.heads {
                let base = h * t * d;
                let qb = &grp.q[base + r0 * d..];
                let gb = &grp.g[base + r0 * d..];
                // P = exp(scale q kᵀ - lse), masked.
                gemm(
                    (br, bc, d),
                    (&mut p, bc, false),
                    (qb, d, 1),
                    (kb, 1, d),
                    scale,
                );
                for i in 0..br {
                    let seen = visible(r0 + i, c0, bc);
                    let l = grp.lse[h * t + r0 + i];
                    let row = &mut p[i * bc..(i + 1) * bc];
                    for x in &mut row[..seen] {
                        *x = (*x - l).exp();
                    }
                    row[seen..].fill(0.0);
                }
                // dV += Pᵀ dO.
                gemm(
                    (bc, d, br),
                    (&mut dv[c0 * d..], d, true),
                    (&p, 1, bc),
                    (gb, d, 1),
                    1.0,
                );
                // dP = dO vᵀ; dS = P ∘ (dP - delta).
                gemm(
                    (br, bc, d),
                    (&mut ds, bc, false),
                    (gb, d, 1),
                    (vb, 1, d),
                    1.0,
                );
                for i in 0..br {
                    let delta = grp.delta[h * t + r0 + i];
                    let rows = ds[i * bc..(i + 1) * bc]
                        .iter_mut()
                        .zip(&p[i * bc..(i + 1) * bc]);
                    for (x, &pr) in rows {
                        *x = pr * (*x - delta);
                    }
                }
                // dK += scale dSᵀ q; dQ += scale dS k.
                gemm(
                    (bc, d, br),
                    (&mut dk[c0 * d..], d, true),
                    (&ds, 1, bc),
                    (qb, d, 1),
                    scale,
                );
                gemm(
                    (br, d, bc),
                    (&mut dq[base + r0 * d..], d, true),
                    (&ds, bc, 1),
                    (kb, d, 1),
                    scale,
                );
            }
        }
    }
}

/// The candle op: `q`, `k`, `v` in, the attention out; keeps the log-sum-exp for the
/// backward pass.
struct BlockwiseAttention {
    dims: AttnDims,
    scale: f32,
    lse: Mutex<Option<Vec<f32>>>,
}

fn f32_slice<'a>(storage: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("blockwise attention needs a contiguous {what}");
    };
    Ok(&storage.as_slice::<f32>()?[start..end])
}

fn poisoned<T>(_: T) -> candle_core::Error {
    candle_core::Error::Msg("blockwise attention: a thread panicked holding its state".into())
}

impl CustomOp3 for BlockwiseAttention {
    fn name(&self) -> &'static str {
        "blockwise-attention"
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
        let q = f32_slice(s1, l1, "q")?;
        let k = f32_slice(s2, l2, "k")?;
        let v = f32_slice(s3, l3, "v")?;
        let (out, lse) = forward(q, k, v, self.dims, self.scale)?;
        *self.lse.lock().map_err(poisoned)? = Some(lse);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let guard = self.lse.lock().map_err(poisoned)?;
        let Some(lse) = guard.as_ref() else {
            candle_core::bail!("blockwise attention: backward before forward");
        };
        let [q, k, v, o, g] = [q, k, v, res, grad].map(Tensor::contiguous);
        let (q, k, v, o, g) = (q?, k?, v?, o?, g?);
        let storages = [&q, &k, &v, &o, &g].map(|t| t.storage_and_layout());
        let mut slices: Vec<&[f32]> = Vec::with_capacity(5);
        for (s, l) in &storages {
            let Storage::Cpu(cpu) = &**s else {
                candle_core::bail!("blockwise attention runs on the CPU only");
            };
            slices.push(f32_slice(cpu, l, "input")?);
        }
        let saved = Saved {
            q: slices[0],
            k: slices[1],
            v: slices[2],
            o: slices[3],
            g: slices[4],
            lse,
        };
        let (dq, dk, dv) = backward(&saved, self.dims, self.scale)?;
        let dev = q.device();
        Ok((
            Some(Tensor::from_vec(dq, q.shape(), dev)?),
            Some(Tensor::from_vec(dk, k.shape(), dev)?),
            Some(Tensor::from_vec(dv, v.shape(), dev)?),
        ))
    }
}

/// `softmax(scale q kᵀ + causal mask) v`, differentiable, computed blockwise: `q` is
/// `(b, heads, t, d)`, `k` and `v` are `(b, kv_heads, t, d)` with `kv_heads` dividing `heads`;
/// query head `h` attends with key/value head `h / (heads / kv_heads)`. Returns
/// `(b, heads, t, d)`. f32 CPU tensors only.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let (batch, heads, len, dim) = q.dims4()?;
    let (kb, kv_heads, kt, kd) = k.dims4()?;
    if (kb, kt, kd) != (batch, len, dim) || v.dims4()? != k.dims4()? {
        candle_core::bail!(
            "blockwise attention: q {:?}, k {:?}, v {:?} do not match",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    if !q.device().is_cpu() || q.dtype() != candle_core::DType::F32 {
        candle_core::bail!("blockwise attention runs on f32 CPU tensors only");
    }
    let dims = AttnDims {
        batch,
        heads,
        kv_heads,
        len,
        dim,
    };
    dims.check(q.elem_count(), k.elem_count())?;
    q.contiguous()?.apply_op3(
        &k.contiguous()?,
        &v.contiguous()?,
        BlockwiseAttention {
            dims,
            scale: scale as f32,
            lse: Mutex::new(None),
        },
    )
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var};

    use super::{AttnDims, BLOCK, attention, backward, forward};
    use crate::model::train_ops;

    /// Today's training path: repeated keys and values, full scores, causal softmax.
    fn plain(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
        let n_rep = q.dim(1).unwrap() / k.dim(1).unwrap();
        let k = train_ops::repeat_kv(k, n_rep)
            .unwrap()
            .contiguous()
            .unwrap();
        let v = train_ops::repeat_kv(v, n_rep)
            .unwrap()
            .contiguous()
            .unwrap();
        let scores = (q * scale).unwrap().matmul(&k.t().unwrap()).unwrap();
        train_ops::causal_softmax(&scores)
            .unwrap()
            .matmul(&v)
            .unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    fn max_abs(a: &Tensor) -> f32 {
        a.abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// Output and the gradients of q, k, v under the loss `sum(out ∘ w)`.
    fn run(
        f: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        w: &Tensor,
    ) -> [Tensor; 4] {
        let (q, k, v) = (
            Var::from_tensor(q).unwrap(),
            Var::from_tensor(k).unwrap(),
            Var::from_tensor(v).unwrap(),
        );
        let out = f(q.as_tensor(), k.as_tensor(), v.as_tensor());
        let grads = (&out * w).unwrap().sum_all().unwrap().backward().unwrap();
        let g = |x: &Var| grads.get(x.as_tensor()).unwrap().clone();
        [out.clone(), g(&q), g(&k), g(&v)]
    }

    /// Forward and backward of the blockwise op against the plain path, within f32
    /// rounding relative to each tensor's size.
    fn compare(batch: usize, heads: usize, kv_heads: usize, len: usize, dim: usize) {
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (batch, heads, len, dim), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (batch, kv_heads, len, dim), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (batch, kv_heads, len, dim), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (batch, heads, len, dim), &dev).unwrap();
        let scale = 1.0 / (dim as f64).sqrt();
        let want = run(|q, k, v| plain(q, k, v, scale), (&q, &k, &v), &w);
        let got = run(
            |q, k, v| attention(q, k, v, scale).unwrap(),
            (&q, &k, &v),
            &w,
        );
        for (name, (g, w)) in ["out", "dq", "dk", "dv"].iter().zip(got.iter().zip(&want)) {
            assert_eq!(g.dims(), w.dims(), "{name}");
            let (diff, size) = (max_diff(g, w), max_abs(w).max(1.0));
            assert!(
                diff <= 2e-5 * size,
                "{name} at b={batch} h={heads}/{kv_heads} t={len}: differs by {diff} (size {size})"
            );
        }
    }

    #[test]
    fn matches_the_plain_path_with_grouped_heads_at_every_length() {
        // SmolLM2's 9 query heads over 3 key/value heads; lengths around and past a block
        // (65 is one past it, 300 spans five).
        const { assert!(65 == BLOCK + 1 && 300 > 4 * BLOCK) };
        for len in [1, 7, 64, 65, 300] {
            compare(2, 9, 3, len, 16);
        }
    }

    #[test]
    fn matches_the_plain_path_with_one_key_value_head_per_query_head() {
        for len in [1, 7, 64, 65, 300] {
            compare(2, 3, 3, len, 16);
        }
    }

    #[test]
    fn right_padding_leaves_the_real_positions_unchanged() {
        // Row 0 holds 70 real positions, row 1 only 40 followed by 30 of padding (random
        // values, as the projections of pad tokens would be). The real positions' outputs and
        // gradients must equal those of the 40 positions alone.
        let dev = Device::Cpu;
        let (heads, kv, len, real, dim) = (9, 3, 70, 40, 16);
        let q = Tensor::randn(0f32, 1.0, (2, heads, len, dim), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (2, kv, len, dim), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (2, kv, len, dim), &dev).unwrap();
        // The loss ignores padded positions, as the GRPO loss masks them.
        let w = Tensor::randn(0f32, 1.0, (2, heads, real, dim), &dev).unwrap();
        let pad = Tensor::zeros((2, heads, len - real, dim), candle_core::DType::F32, &dev);
        let w_padded = Tensor::cat(&[&w, &pad.unwrap()], 2).unwrap();
        let scale = 0.25;
        let f = |q: &Tensor, k: &Tensor, v: &Tensor| attention(q, k, v, scale).unwrap();
        let padded = run(f, (&q, &k, &v), &w_padded);
        let row1 = |x: &Tensor| x.narrow(0, 1, 1).unwrap().narrow(2, 0, real).unwrap();
        let alone = run(f, (&row1(&q), &row1(&k), &row1(&v)), &row1(&w_padded));
        for (name, (p, a)) in ["out", "dq", "dk", "dv"]
            .iter()
            .zip(padded.iter().zip(&alone))
        {
            let diff = max_diff(&row1(p), a);
            assert!(
                diff <= 1e-5,
                "{name}: the padding changed real positions by {diff}"
            );
        }
        // The padded keys get no gradient from the real queries.
        for g in &padded[2..] {
            let tail = g
                .narrow(0, 1, 1)
                .unwrap()
                .narrow(2, real, len - real)
                .unwrap();
            assert_eq!(max_abs(&tail), 0.0, "a padded key or value got a gradient");
        }
    }

    #[test]
    fn mismatched_shapes_and_head_counts_are_errors() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((1, 4, 5, 8), candle_core::DType::F32, &dev).unwrap();
        let k = Tensor::zeros((1, 3, 5, 8), candle_core::DType::F32, &dev).unwrap();
        let err = attention(&q, &k, &k, 1.0).unwrap_err().to_string();
        assert!(
            err.contains("4 query heads over 3 key/value heads"),
            "{err}"
        );
        let short = Tensor::zeros((1, 2, 4, 8), candle_core::DType::F32, &dev).unwrap();
        let err = attention(&q, &short, &short, 1.0).unwrap_err().to_string();
        assert!(err.contains("do not match"), "{err}");
        let dims = AttnDims {
            batch: 1,
            heads: 2,
            kv_heads: 1,
            len: 3,
            dim: 2,
        };
        let err = forward(&[0.0; 12], &[0.0; 5], &[0.0; 5], dims, 1.0).unwrap_err();
        assert!(err.to_string().contains("do not fit"), "{err}");
        let saved = super::Saved {
            q: &[0.0; 12],
            k: &[0.0; 6],
            v: &[0.0; 6],
            o: &[0.0; 12],
            g: &[0.0; 11],
            lse: &[0.0; 6],
        };
        let err = backward(&saved, dims, 1.0).unwrap_err();
        assert!(err.to_string().contains("do not fit"), "{err}");
    }
}
