//! `x W^T` for a [`QuantWeight`]: the decode step's product, reading each block once.
//!
//! The input rows are quantised first, as llama.cpp does: each block of 32 values gets the
//! scale `s = max|x| / 127` and the bytes `round(x / s)` (half away from zero), and for `Q4_1`
//! also the block sum `s * sum(bytes)`. A block's product is then an exact integer dot
//! product times the two scales (`Q8_0`), plus the weight's minimum times the input's block
//! sum (`Q4_1`). Rounding the input to 8 bits is the only approximation beyond the weights'
//! own: for each block the error is at most `s / 2` per input value, so an output differs
//! from the product with the dequantised weight by at most
//! `sum over blocks of (s_block / 2) * sum |w|` (plus f32 rounding).
//!
//! As in [`super::small_matmul`], each weight row is read once and multiplied with up to
//! [`GROUP`] input rows while it sits in registers, so a step of eight rows costs little more
//! memory traffic than a step of one. The inner loop exists for AVX2 with FMA and F16C (chosen
//! at run time when the CPU has them) and in portable Rust; the two sum in different orders,
//! so their results may differ in the last bits ([`kernel_name`] says which one runs).
use candle_core::{Result, Tensor};
use rayon::prelude::*;

use super::quant::{BlockFormat, QuantWeight, f16_bits_to_f32};

/// Input rows multiplied together with one pass over a weight row.
pub const GROUP: usize = 8;

/// Most input rows the inference path sends through the blocks; a longer input (prefill)
/// runs the f32 GEMM, which is faster there.
pub const MAX_ROWS: usize = 16;

/// Output columns per parallel task.
const BLOCK: usize = 32;

const QK: usize = BlockFormat::VALUES;

/// The input rows in 8-bit blocks.
struct Activations {
    /// Blocks per row.
    blocks: usize,
    /// Per row and block: the scale.
    scales: Vec<f32>,
    /// Per row and block: the scale times the sum of the bytes.
    sums: Vec<f32>,
    /// Per row and block: 32 signed bytes.
    qs: Vec<i8>,
}

impl Activations {
    fn quantize(x: &[f32], rows: usize, k: usize) -> Self {
        let blocks = k / QK;
        let mut scales = Vec::with_capacity(rows * blocks);
        let mut sums = Vec::with_capacity(rows * blocks);
        let mut qs = Vec::with_capacity(rows * k);
        for block in x.chunks_exact(QK) {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for &v in block {
                let q = (v * id).round() as i8;
                sum += i32::from(q);
                qs.push(q);
            }
            scales.push(d);
            sums.push(d * sum as f32);
        }
        Self {
            blocks,
            scales,
            sums,
            qs,
        }
    }
}

/// Which inner loop [`matmul_t`] uses on this CPU: `"avx2"` or `"portable"`.
pub fn kernel_name() -> &'static str {
    if has_avx2_fma_f16c() {
        "avx2"
    } else {
        "portable"
    }
}

fn has_avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::small_matmul::has_avx2_fma() && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x W^T` for `x` `(rows, in)` f32 on the CPU and `w` `(out, in)`; returns `(rows, out)`.
pub fn matmul_t(w: &QuantWeight, x: &Tensor) -> Result<Tensor> {
    let (rows, k) = x.dims2()?;
    let (n, wk) = w.dims();
    if k != wk {
        candle_core::bail!("quantised matmul: input has {k} features, weight takes {wk}");
    }
    let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
    let act = Activations::quantize(&xs, rows, k);
    let fast = has_avx2_fma_f16c();
    let row_bytes = w.blocks_per_row() * w.format().block_bytes();
    let data = w.data();
    let format = w.format();
    // Output transposed, (out, rows): each task owns a block of weight rows.
    let mut out_t = vec![0f32; n * rows];
    out_t
        .par_chunks_mut(BLOCK * rows)
        .enumerate()
        .for_each(|(b, chunk)| {
            let first = b * BLOCK;
            let len = chunk.len() / rows;
            let wb = &data[first * row_bytes..(first + len) * row_bytes];
            if fast {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU was checked for AVX2, FMA and F16C just above.
                #[allow(unsafe_code)]
                unsafe {
                    avx2::rows(format, wb, row_bytes, &act, rows, chunk)
                };
            } else {
                for (j, cells) in chunk.chunks_mut(rows).enumerate() {
                    let wrow = &wb[j * row_bytes..][..row_bytes];
                    row_portable(format, wrow, &act, 0, cells);
                }
            }
        });
    let mut out = vec![0f32; rows * n];
    for (o, cells) in out_t.chunks(rows).enumerate() {
        for (r, &v) in cells.iter().enumerate() {
            out[r * n + o] = v;
        }
    }
    Tensor::from_vec(out, (rows, n), x.device())
}

/// `out[r] = x[first + r] . w` for one weight row, in portable Rust.
fn row_portable(
    format: BlockFormat,
    wrow: &[u8],
    act: &Activations,
    first: usize,
    out: &mut [f32],
) {
    let nb = act.blocks;
    let bb = format.block_bytes();
    for (r, o) in out.iter_mut().enumerate() {
        let xr = first + r;
        let mut acc = 0f32;
        for (b, blk) in wrow.chunks_exact(bb).enumerate() {
            let d = f16_bits_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
            let xq = &act.qs[(xr * nb + b) * QK..][..QK];
            let sx = act.scales[xr * nb + b];
            match format {
                BlockFormat::Q8_0 => {
                    let dot: i32 = blk[2..]
                        .iter()
                        .zip(xq)
                        .map(|(&w, &x)| i32::from(w as i8) * i32::from(x))
                        .sum();
                    acc += d * sx * dot as f32;
                }
                BlockFormat::Q4_1 => {
                    let m = f16_bits_to_f32(u16::from_le_bytes([blk[2], blk[3]]));
                    let qs = &blk[4..];
                    let lo: i32 = qs
                        .iter()
                        .zip(&xq[..16])
                        .map(|(&w, &x)| i32::from(w & 0x0F) * i32::from(x))
                        .sum();
                    let hi: i32 = qs
                        .iter()
                        .zip(&xq[16..])
                        .map(|(&w, &x)| i32::from(w >> 4) * i32::from(x))
                        .sum();
                    acc += d * sx * (lo + hi) as f32 + m * act.sums[xr * nb + b];
                }
            }
        }
        *o = acc;
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2 {
    //! The AVX2 inner loop: 32 products of a block in one `maddubs`, up to [`GROUP`] input
    //! rows per pass over a weight row, two accumulator sets when there are few rows (so the
    //! FMA latency overlaps).
    use std::arch::x86_64::*;

    use super::{Activations, BlockFormat, GROUP, QK};

    /// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` (rows of `row_bytes`)
    /// and each of the `n` input rows.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows(
        format: BlockFormat,
        w: &[u8],
        row_bytes: usize,
        act: &Activations,
        n: usize,
        out: &mut [f32],
    ) {
        let nb = act.blocks;
        assert_eq!(row_bytes, nb * format.block_bytes());
        assert_eq!(act.qs.len(), n * nb * QK);
        assert_eq!(act.scales.len(), n * nb);
        assert_eq!(act.sums.len(), n * nb);
        assert_eq!(out.len(), w.len() / row_bytes * n);
        for (j, wrow) in w.chunks_exact(row_bytes).enumerate() {
            let cells = &mut out[j * n..(j + 1) * n];
            let mut g = 0;
            while g < n {
                let len = GROUP.min(n - g);
                let o = &mut cells[g..g + len];
                // SAFETY: rows g..g + len of the activations exist (checked above) and the
                // weight row holds `nb` blocks.
                unsafe {
                    match (format, len) {
                        (BlockFormat::Q8_0, 1) => q8::<1, 2>(wrow, act, g, o),
                        (BlockFormat::Q8_0, 2) => q8::<2, 2>(wrow, act, g, o),
                        (BlockFormat::Q8_0, 3) => q8::<3, 2>(wrow, act, g, o),
                        (BlockFormat::Q8_0, 4) => q8::<4, 1>(wrow, act, g, o),
                        (BlockFormat::Q8_0, 5) => q8::<5, 1>(wrow, act, g, o),
                        (BlockFormat::Q8_0, 6) => q8::<6, 1>(wrow, act, g, o),
                        (BlockFormat::Q8_0, 7) => q8::<7, 1>(wrow, act, g, o),
                        (BlockFormat::Q8_0, _) => q8::<8, 1>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 1) => q4::<1, 2>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 2) => q4::<2, 2>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 3) => q4::<3, 2>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 4) => q4::<4, 1>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 5) => q4::<5, 1>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 6) => q4::<6, 1>(wrow, act, g, o),
                        (BlockFormat::Q4_1, 7) => q4::<7, 1>(wrow, act, g, o),
                        (BlockFormat::Q4_1, _) => q4::<8, 1>(wrow, act, g, o),
                    }
                }
                g += len;
            }
        }
    }

    /// One f16 bit pattern at `p` as f32, through F16C.
    #[inline(always)]
    unsafe fn half(p: *const u8) -> f32 {
        // SAFETY: the caller points at two readable bytes.
        unsafe {
            let bits = i32::from(u16::from_le_bytes([*p, *p.add(1)]));
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
        }
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        // SAFETY: register-only AVX arithmetic; the caller runs with AVX2 enabled.
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }
    }

    /// `N` input rows from `first` against one `Q8_0` weight row, with `K` accumulator sets
    /// taking alternate blocks.
    ///
    /// # Safety
    /// AVX2/FMA/F16C; `wrow` holds `act.blocks` blocks and rows `first..first + N` exist.
    #[inline(always)]
    unsafe fn q8<const N: usize, const K: usize>(
        wrow: &[u8],
        act: &Activations,
        first: usize,
        out: &mut [f32],
    ) {
        let nb = act.blocks;
        // SAFETY: every pointer below stays inside `wrow` (block b < nb of 34 bytes) or the
        // activations of rows first..first + N (checked by the caller).
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [[_mm256_setzero_ps(); N]; K];
            let wp = wrow.as_ptr();
            let xq = act.qs.as_ptr().add(first * nb * QK);
            let xs = act.scales.as_ptr().add(first * nb);
            let mut b = 0;
            while b < nb {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let bk = b + k;
                    if bk >= nb {
                        break;
                    }
                    let blk = wp.add(bk * 34);
                    let d = half(blk);
                    let w = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                    let aw = _mm256_sign_epi8(w, w);
                    for (r, a) in acc.iter_mut().enumerate() {
                        let x = _mm256_loadu_si256(xq.add((r * nb + bk) * QK) as *const __m256i);
                        let sx = _mm256_sign_epi8(x, w);
                        let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                        let scale = _mm256_set1_ps(d * *xs.add(r * nb + bk));
                        *a = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), *a);
                    }
                }
                b += K;
            }
            for (r, o) in out.iter_mut().enumerate().take(N) {
                let mut v = acc[0][r];
                for a in &acc[1..] {
                    v = _mm256_add_ps(v, a[r]);
                }
                *o = hsum(v);
            }
        }
    }

    /// `N` input rows from `first` against one `Q4_1` weight row (see [`q8`]).
    ///
    /// # Safety
    /// As for [`q8`], with 20-byte blocks.
    #[inline(always)]
    unsafe fn q4<const N: usize, const K: usize>(
        wrow: &[u8],
        act: &Activations,
        first: usize,
        out: &mut [f32],
    ) {
        let nb = act.blocks;
        // SAFETY: as in `q8`, with blocks of 20 bytes.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let low = _mm256_set1_epi8(0x0F);
            let mut acc = [[_mm256_setzero_ps(); N]; K];
            let mut mins = [[0f32; N]; K];
            let wp = wrow.as_ptr();
            let xq = act.qs.as_ptr().add(first * nb * QK);
            let xs = act.scales.as_ptr().add(first * nb);
            let xm = act.sums.as_ptr().add(first * nb);
            let mut b = 0;
            while b < nb {
                for (k, (acc, mins)) in acc.iter_mut().zip(mins.iter_mut()).enumerate() {
                    let bk = b + k;
                    if bk >= nb {
                        break;
                    }
                    let blk = wp.add(bk * 20);
                    let d = half(blk);
                    let m = half(blk.add(2));
                    let q = _mm_loadu_si128(blk.add(4) as *const __m128i);
                    let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
                    for (r, (a, mr)) in acc.iter_mut().zip(mins.iter_mut()).enumerate() {
                        let x = _mm256_loadu_si256(xq.add((r * nb + bk) * QK) as *const __m256i);
                        let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
                        let scale = _mm256_set1_ps(d * *xs.add(r * nb + bk));
                        *a = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), *a);
                        *mr = m.mul_add(*xm.add(r * nb + bk), *mr);
                    }
                }
                b += K;
            }
            for (r, o) in out.iter_mut().enumerate().take(N) {
                let mut v = acc[0][r];
                for a in &acc[1..] {
                    v = _mm256_add_ps(v, a[r]);
                }
                *o = hsum(v) + mins.iter().map(|m| m[r]).sum::<f32>();
            }
        }
    }
}
