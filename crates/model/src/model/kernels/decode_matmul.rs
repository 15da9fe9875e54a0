//! `x W^T` for the few rows of a decode step, reading each weight once.
//!
//! With a handful of rows (a group of completions, a batch of episodes) the GEMM behind
//! `matmul` repacks the whole weight matrix on every call, which cost more than the product
//! itself and made a decode step's time grow with the batch. Here each weight row is read once
//! and multiplied with up to four input rows while it sits in registers, so a step of eight
//! rows costs little more than a step of one: decoding is bound by reading the weights. The
//! inner loop is compiled twice, for AVX2 with FMA (picked at run time when the CPU has them)
//! and for the baseline target.
use candle_core::{CpuStorage, Result, Storage, Tensor};

/// Most input rows the kernel takes; larger inputs (prefill) go through GEMM.
pub const MAX_ROWS: usize = 16;

/// Output columns per parallel task.
const BLOCK: usize = 64;

/// Input rows multiplied together with one pass over a weight row.
const GROUP: usize = 4;

/// Lanes per accumulator: two 8-wide vectors, enough independent sums to hide FMA latency.
const LANES: usize = 16;

/// Whether [`matmul_t`] applies: f32 on the CPU, at most [`MAX_ROWS`] rows, contiguous.
pub fn applies(x: &Tensor, weight: &Tensor, rows: usize) -> bool {
    rows <= MAX_ROWS
        && x.device().is_cpu()
        && x.dtype() == candle_core::DType::F32
        && weight.dtype() == candle_core::DType::F32
        && weight.is_contiguous()
}

/// `x W^T` for `x` `(rows, in)` and `weight` `(out, in)`, both f32 on the CPU; no gradient.
pub fn matmul_t(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let (rows, k) = x.dims2()?;
    let (n, wk) = weight.dims2()?;
    if k != wk {
        candle_core::bail!("small matmul: input has {k} features, weight takes {wk}");
    }
    let x: Vec<f32> = x.flatten_all()?.to_vec1()?;
    let (storage, layout) = weight.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(w)) = &*storage else {
        candle_core::bail!("small matmul needs an f32 CPU weight");
    };
    let w = &w[layout.start_offset()..][..n * k];
    let fast = has_avx2_fma();
    // Output transposed, (out, rows): each task owns a block of weight rows.
    let mut out_t = vec![0f32; n * rows];
    super::decode_pool::for_each_chunk_mut(&mut out_t, BLOCK * rows, |b, chunk| {
        let first = b * BLOCK;
        let len = chunk.len() / rows;
        let wb = &w[first * k..(first + len) * k];
        if fast {
            // SAFETY: the CPU was checked for AVX2 and FMA just above.
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            unsafe {
                block_avx2(&x, rows, k, wb, chunk)
            };
        } else {
            block(&x, rows, k, wb, chunk, |a, b, c| a * b + c);
        }
    });
    let mut out = vec![0f32; rows * n];
    for (o, cells) in out_t.chunks(rows).enumerate() {
        for (r, &v) in cells.iter().enumerate() {
            out[r * n + o] = v;
        }
    }
    Tensor::from_vec(out, (rows, n), weight.device())
}

/// Whether this CPU has AVX2 and FMA (checked once by the standard library, then cached).
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_avx2(x: &[f32], rows: usize, k: usize, w: &[f32], out: &mut [f32]) {
    block(x, rows, k, w, out, f32::mul_add);
}

/// `out[j * rows + r] = x[r] . w[j]` for every weight row `j` of `w` and input row `r`;
/// `fma(a, b, c)` is `a * b + c`.
#[inline(always)]
fn block(
    x: &[f32],
    rows: usize,
    k: usize,
    w: &[f32],
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let full = k - k % LANES;
    for (j, wrow) in w.chunks_exact(k).enumerate() {
        let cells = &mut out[j * rows..(j + 1) * rows];
        for g in (0..rows).step_by(GROUP) {
            let n = GROUP.min(rows - g);
            let mut acc = [[0f32; LANES]; GROUP];
            let mut i = 0;
            while i < full {
                let wv = &wrow[i..i + LANES];
                for (r, a) in acc.iter_mut().enumerate().take(n) {
                    let xv = &x[(g + r) * k + i..][..LANES];
                    for ((s, &p), &q) in a.iter_mut().zip(xv).zip(wv) {
                        *s = fma(p, q, *s);
                    }
                }
                i += LANES;
            }
            for (r, a) in acc.iter().enumerate().take(n) {
                let xr = &x[(g + r) * k..][..k];
                let tail: f32 = (full..k).map(|t| xr[t] * wrow[t]).sum();
                cells[g + r] = a.iter().sum::<f32>() + tail;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_matmul_for_every_row_count_and_odd_widths() {
        for (rows, k, n) in [
            (1, 576, 70),
            (3, 37, 129),
            (4, 64, 64),
            (9, 100, 5),
            (16, 16, 200),
        ] {
            let x = Tensor::randn(0f32, 1.0, (rows, k), &Device::Cpu).unwrap();
            let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
            let want = x.matmul(&w.t().unwrap()).unwrap();
            let got = matmul_t(&x, &w).unwrap();
            let d: f32 = (want - got)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar()
                .unwrap();
            assert!(d < 1e-3, "rows {rows} k {k} n {n}: {d}");
        }
    }
}
