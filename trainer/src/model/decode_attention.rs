//! Attention of one new position over the cache, on the CPU, reading the cache in place.
//!
//! A decode step attends a single query per head over every cached key. Through `matmul`
//! that is one small GEMM per (row, key/value head) pair, each packing its strided operand
//! and waking the thread pool: for a thousand cached positions that overhead was several
//! times the cost of the model's weights. This does the same arithmetic directly, one task per
//! (row, head): a dot product per cached key, a softmax, a weighted sum of values, with the
//! inner loops compiled for AVX2 and FMA when the CPU has them.
use candle_core::{CpuStorage, Result, Storage, Tensor};
use rayon::prelude::*;

use super::small_matmul::has_avx2_fma;

/// `softmax(q k^T * scale + mask) v` for one position.
///
/// `q` is `(b, heads, 1, d)` contiguous; `k` and `v` are `(b, kv_heads, slots, d)` with a
/// unit last stride (views of the cache buffers); `mask` is `None` or `(b or 1, 1, 1, slots)`
/// with 0 or -inf. Query head `h` reads key/value head `h / (heads / kv_heads)`. Returns
/// `(b, heads, 1, d)`.
pub fn attend_one(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    let (b, heads, t, d) = q.dims4()?;
    let (_, kv_heads, slots, _) = k.dims4()?;
    if t != 1 {
        candle_core::bail!("decode attention takes one query position");
    }
    let n_rep = heads / kv_heads;
    let scale = scale as f32;
    let mask_rows = match mask {
        Some(m) => m.dim(0)?,
        None => 0,
    };
    let mask_data: Option<Vec<f32>> = mask.map(|m| m.flatten_all()?.to_vec1()).transpose()?;
    let q: Vec<f32> = q.flatten_all()?.to_vec1()?;
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(kd)), Storage::Cpu(CpuStorage::F32(vd))) = (&*ks, &*vs)
    else {
        candle_core::bail!("decode attention needs f32 CPU tensors");
    };
    let (kst, vst) = (kl.stride(), vl.stride());
    if kst[3] != 1 || vst[3] != 1 {
        candle_core::bail!("decode attention needs a unit last stride");
    }
    let (ko, vo) = (kl.start_offset(), vl.start_offset());
    let fast = has_avx2_fma();
    let mut out = vec![0f32; b * heads * d];
    out.par_chunks_mut(d).enumerate().for_each(|(idx, o)| {
        let (row, h) = (idx / heads, idx % heads);
        let g = h / n_rep;
        let m = mask_data.as_deref().map(|m| {
            let r = if mask_rows == 1 { 0 } else { row };
            &m[r * slots..(r + 1) * slots]
        });
        let head = Head {
            query: &q[idx * d..][..d],
            keys: &kd[ko + row * kst[0] + g * kst[1]..],
            key_stride: kst[2],
            values: &vd[vo + row * vst[0] + g * vst[1]..],
            value_stride: vst[2],
            slots,
            mask: m,
            scale,
        };
        if fast {
            // SAFETY: the CPU was checked for AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            unsafe {
                head_avx2(&head, o)
            };
        } else {
            attend_head(&head, o, |a, b, c| a * b + c);
        }
    });
    Tensor::from_vec(out, (b, heads, 1, d), k.device())
}

/// One query head over its key/value head.
struct Head<'a> {
    query: &'a [f32],
    keys: &'a [f32],
    key_stride: usize,
    values: &'a [f32],
    value_stride: usize,
    slots: usize,
    mask: Option<&'a [f32]>,
    scale: f32,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn head_avx2(head: &Head, out: &mut [f32]) {
    attend_head(head, out, f32::mul_add);
}

/// Writes the attention output of `head` into `out`; `fma(a, b, c)` is `a * b + c`.
#[inline(always)]
fn attend_head(head: &Head, out: &mut [f32], fma: impl Fn(f32, f32, f32) -> f32 + Copy) {
    let d = head.query.len();
    let mut scores = vec![0f32; head.slots];
    let mut max = f32::NEG_INFINITY;
    for (j, s) in scores.iter_mut().enumerate() {
        let key = &head.keys[j * head.key_stride..][..d];
        let mut acc = [0f32; 16];
        let mut tail = 0f32;
        let (qc, kc) = (head.query.chunks_exact(16), key.chunks_exact(16));
        for (&x, &y) in qc.remainder().iter().zip(kc.remainder()) {
            tail = fma(x, y, tail);
        }
        for (x, y) in qc.zip(kc) {
            for ((a, &p), &q) in acc.iter_mut().zip(x).zip(y) {
                *a = fma(p, q, *a);
            }
        }
        *s = (acc.iter().sum::<f32>() + tail) * head.scale + head.mask.map_or(0.0, |m| m[j]);
        max = max.max(*s);
    }
    let mut total = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        total += *s;
    }
    out.fill(0.0);
    for (j, &p) in scores.iter().enumerate() {
        if p == 0.0 {
            continue;
        }
        let w = p / total;
        let value = &head.values[j * head.value_stride..][..d];
        for (x, &y) in out.iter_mut().zip(value) {
            *x = fma(w, y, *x);
        }
    }
}
