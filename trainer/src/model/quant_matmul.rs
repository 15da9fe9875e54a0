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
            for (j, cells) in chunk.chunks_mut(rows).enumerate() {
                let wrow = &data[(first + j) * row_bytes..][..row_bytes];
                for g in (0..rows).step_by(GROUP) {
                    let len = GROUP.min(rows - g);
                    let out = &mut cells[g..g + len];
                    if fast {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: the CPU was checked for AVX2, FMA and F16C just above.
                        #[allow(unsafe_code)]
                        unsafe {
                            avx2::row(format, wrow, &act, g, out)
                        };
                    } else {
                        row_portable(format, wrow, &act, g, out);
                    }
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
    //! The AVX2 inner loop: 32 products of a block in one `maddubs`.
    use std::arch::x86_64::*;

    use super::{Activations, BlockFormat, GROUP, QK};

    /// One f16 bit pattern as f32, through F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn half(lo: u8, hi: u8) -> f32 {
        let bits = i32::from(u16::from_le_bytes([lo, hi]));
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// The 32 bytes of `b` (which holds exactly 32).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn load32(b: &[u8]) -> __m256i {
        assert_eq!(b.len(), 32);
        // SAFETY: `b` holds 32 bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(b.as_ptr() as *const __m256i) }
    }

    /// The 32 bytes of `b` (which holds exactly 32).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn load32_i8(b: &[i8]) -> __m256i {
        assert_eq!(b.len(), 32);
        // SAFETY: `b` holds 32 bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(b.as_ptr() as *const __m256i) }
    }

    /// The 16 bytes of `b` (which holds exactly 16).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn load16(b: &[u8]) -> __m128i {
        assert_eq!(b.len(), 16);
        // SAFETY: `b` holds 16 bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(b.as_ptr() as *const __m128i) }
    }

    /// `out[r] = x[first + r] . w` for one weight row, `out.len() <= GROUP`.
    ///
    /// Calling it needs a CPU with AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn row(
        format: BlockFormat,
        wrow: &[u8],
        act: &Activations,
        first: usize,
        out: &mut [f32],
    ) {
        let nb = act.blocks;
        let n = out.len().min(GROUP);
        let bb = format.block_bytes();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); GROUP];
        let mut mins = [0f32; GROUP];
        for b in 0..nb {
            let blk = &wrow[b * bb..][..bb];
            let d = half(blk[0], blk[1]);
            match format {
                BlockFormat::Q8_0 => {
                    let w = load32(&blk[2..34]);
                    let aw = _mm256_sign_epi8(w, w);
                    for r in 0..n {
                        let i = (first + r) * nb + b;
                        let x = load32_i8(&act.qs[i * QK..][..QK]);
                        let sx = _mm256_sign_epi8(x, w);
                        let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                        let scale = _mm256_set1_ps(d * act.scales[i]);
                        acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), acc[r]);
                    }
                }
                BlockFormat::Q4_1 => {
                    let m = half(blk[2], blk[3]);
                    let q = load16(&blk[4..20]);
                    let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
                    let w = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
                    for r in 0..n {
                        let i = (first + r) * nb + b;
                        let x = load32_i8(&act.qs[i * QK..][..QK]);
                        let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
                        let scale = _mm256_set1_ps(d * act.scales[i]);
                        acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), acc[r]);
                        mins[r] = m.mul_add(act.sums[i], mins[r]);
                    }
                }
            }
        }
        for r in 0..n {
            out[r] = hsum(acc[r]) + mins[r];
        }
    }
}
