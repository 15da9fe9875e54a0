//! Attention of one new position over the cache, on the CPU, reading the cache in place.
//!
//! A decode step attends a single query per head over every cached key. Through `matmul`
//! that is one small GEMM per (row, key/value head) pair, each packing its strided operand
//! and waking the thread pool: for a thousand cached positions that overhead was several
//! times the cost of the model's weights. This does the same arithmetic directly, one task per
//! (row, key/value head): a dot product per cached key, a softmax, a weighted sum of values
//! for each query head of the group, with the inner loops compiled for AVX2 and FMA when the
//! CPU has them. With long contexts the cache is the larger read of a decode step (at 2,000
//! positions SmolLM2's keys and values are 94 MB per row, its Q4_1 weights 96 MB), so the
//! query heads that share a key/value head read it once between them.
use candle_core::{CpuStorage, Result, Storage, Tensor};

pub(crate) use super::decode_matmul::has_avx2_fma;

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
    // One task per (row, key/value head): the query heads that share a key/value head read
    // each cached key and value once between them, instead of once each. With fewer such
    // pairs than two per thread (one row of a model with few key/value heads), one task per
    // query head keeps every thread busy instead.
    let (b, kv_heads) = (q.dim(0)?, k.dim(1)?);
    let grouped = b * kv_heads >= 2 * super::decode_pool::threads();
    attend_split(q, k, v, mask, scale, grouped)
}

/// [`attend_one`] with one task per (row, key/value head) when `grouped`, else one per
/// query head; both give the same bits.
fn attend_split(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
    grouped: bool,
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
    let per_task = if grouped { n_rep } else { 1 };
    super::decode_pool::for_each_chunk_mut(&mut out, per_task * d, |idx, o| {
        let first = idx * per_task;
        let (row, g) = (first / heads, (first % heads) / n_rep);
        let m = mask_data.as_deref().map(|m| {
            let r = if mask_rows == 1 { 0 } else { row };
            &m[r * slots..(r + 1) * slots]
        });
        let group = Group {
            queries: &q[first * d..][..per_task * d],
            dim: d,
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
                group_avx2(&group, o)
            };
        } else {
            attend_group(&group, o, |a, b, c| a * b + c);
        }
    });
    Tensor::from_vec(out, (b, heads, 1, d), k.device())
}

/// Query heads that share one key/value head, over that head's cache.
struct Group<'a> {
    /// Queries of `dim` values each, back to back.
    queries: &'a [f32],
    dim: usize,
    keys: &'a [f32],
    key_stride: usize,
    values: &'a [f32],
    value_stride: usize,
    slots: usize,
    mask: Option<&'a [f32]>,
    scale: f32,
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn group_avx2(group: &Group, out: &mut [f32]) {
    if group.dim.is_multiple_of(8) {
        // SAFETY: the caller checked AVX2 and FMA; the head size is a multiple of 8.
        #[allow(unsafe_code)]
        unsafe {
            avx2::attend(group, out)
        };
    } else {
        attend_group(group, out, f32::mul_add);
    }
}

/// Writes the attention output of every query of `group` into `out` (the queries' outputs
/// back to back); `fma(a, b, c)` is `a * b + c`. Each query's arithmetic is in the same order
/// as for a query alone.
#[inline(always)]
fn attend_group(group: &Group, out: &mut [f32], fma: impl Fn(f32, f32, f32) -> f32 + Copy) {
    let d = group.dim;
    let n = group.queries.len() / d;
    let slots = group.slots;
    let mut scores = vec![0f32; n * slots];
    let mut max = vec![f32::NEG_INFINITY; n];
    for j in 0..slots {
        let key = &group.keys[j * group.key_stride..][..d];
        let bias = group.mask.map_or(0.0, |m| m[j]);
        for (r, query) in group.queries.chunks_exact(d).enumerate() {
            let mut acc = [0f32; 16];
            let mut tail = 0f32;
            let (qc, kc) = (query.chunks_exact(16), key.chunks_exact(16));
            for (&x, &y) in qc.remainder().iter().zip(kc.remainder()) {
                tail = fma(x, y, tail);
            }
            for (x, y) in qc.zip(kc) {
                for ((a, &p), &q) in acc.iter_mut().zip(x).zip(y) {
                    *a = fma(p, q, *a);
                }
            }
            let s = (acc.iter().sum::<f32>() + tail) * group.scale + bias;
            scores[r * slots + j] = s;
            max[r] = max[r].max(s);
        }
    }
    let mut total = vec![0f32; n];
    for (r, row) in scores.chunks_exact_mut(slots).enumerate() {
        for s in row.iter_mut() {
            *s = (*s - max[r]).exp();
            total[r] += *s;
        }
    }
    out.fill(0.0);
    for j in 0..slots {
        let value = &group.values[j * group.value_stride..][..d];
        for (r, o) in out.chunks_exact_mut(d).enumerate() {
            let p = scores[r * slots + j];
            if p == 0.0 {
                continue;
            }
            let w = p / total[r];
            for (x, &y) in o.iter_mut().zip(value) {
                *x = fma(w, y, *x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::attend_split;

    /// softmax(q k^T * scale + mask) v by candle ops, with each key/value head repeated for
    /// the query heads that share it.
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> Tensor {
        let (_, heads, _, _) = q.dims4().unwrap();
        let kv_heads = k.dim(1).unwrap();
        let rep = |t: &Tensor| {
            let parts: Vec<Tensor> = (0..heads)
                .map(|h| t.narrow(1, h / (heads / kv_heads), 1).unwrap())
                .collect();
            Tensor::cat(&parts, 1).unwrap().contiguous().unwrap()
        };
        let (k, v) = (rep(k), rep(v));
        let scores = (q.matmul(&k.t().unwrap().contiguous().unwrap()).unwrap() * scale)
            .unwrap()
            .broadcast_add(mask)
            .unwrap();
        candle_nn::ops::softmax_last_dim(&scores)
            .unwrap()
            .matmul(&v)
            .unwrap()
    }

    #[test]
    fn grouped_heads_equal_repeated_keys_and_values_with_a_mask() {
        // d = 20: the generic loop (a 16-wide chunk and a tail); d = 64: the AVX2 loop where
        // the CPU has it (37 slots: nine blocks of four keys and one left over).
        for d in [20, 64] {
            grouped_heads_case(d);
        }
    }

    fn grouped_heads_case(d: usize) {
        // 2 rows, 6 query heads over 2 key/value heads (3 per group), 37 slots, each row
        // masking different slots.
        let dev = Device::Cpu;
        let (b, heads, kv, slots) = (2, 6, 2, 37);
        let q = Tensor::randn(0f32, 1.0, (b, heads, 1, d), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (b, kv, slots, d), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (b, kv, slots, d), &dev).unwrap();
        let mask: Vec<f32> = (0..b * slots)
            .map(|i| {
                let (row, j) = (i / slots, i % slots);
                if j % 5 == row { f32::NEG_INFINITY } else { 0.0 }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (b, 1, 1, slots), &dev).unwrap();
        let scale = 0.125;
        // A task per (row, key/value head) against a task per query head.
        let on = |grouped: bool| attend_split(&q, &k, &v, Some(&mask), scale, grouped).unwrap();
        let (grouped, alone) = (on(true), on(false));
        let bits = |t: &Tensor| -> Vec<u32> {
            let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        };
        assert_eq!(
            bits(&grouped),
            bits(&alone),
            "the split changed the arithmetic"
        );
        let want = reference(&q, &k, &v, &mask, scale);
        let diff = (grouped - want)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 1e-5, "d = {d}: largest difference {diff}");
    }
}
