//! The AVX-512 VNNI inner loop: two blocks (64 bytes) of a weight row against two blocks of an
//! input row in one `vpdpbusd`, which multiplies unsigned by signed bytes and sums each four
//! products into a 32-bit lane, where AVX2 needs `maddubs` and `madd` per block.
//!
//! Its results equal [`super::avx2`]'s bit for bit: the integer sums are exact in both (a
//! lane sums four products of at most `128 * 127`), lane `i` of a block holds the sum of the
//! products of bytes `4i..4i + 4` in both, and the f32 work is the same sequence of FMAs into
//! the same `K` accumulators of 8 lanes (block `b` into accumulator `b % K`, `K` chosen from
//! the row count as there), the accumulators added in order and summed by the same [`hsum`],
//! and the `Q4_1` minimum term is the same function.
//! So a run samples the same tokens from the same seed on CPUs with and without AVX-512.
use std::arch::x86_64::*;

use super::avx2::{half, hsum, q4_mins};
use super::{Activations, BlockFormat, GROUP, QK};

/// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` (rows of `row_bytes`)
/// and each of the `n` input rows.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
            // weight row holds `nb` blocks. `K` per row count as in `avx2::rows`.
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

/// Adds the two blocks of `dot` (lanes 0..8 block `b`, lanes 8..16 block `b + 1`) into the
/// accumulators `b % K` and `(b + 1) % K` with their scales, in block order.
///
/// # Safety
/// AVX-512 F and FMA.
#[inline(always)]
unsafe fn add_pair<const K: usize>(
    acc: &mut [__m256; K],
    b: usize,
    dot: __m512i,
    scale_lo: f32,
    scale_hi: f32,
) {
    // SAFETY: register-only arithmetic; the caller runs with AVX-512 F and FMA enabled.
    unsafe {
        let f = _mm512_cvtepi32_ps(dot);
        let lo = _mm512_castps512_ps256(f);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1));
        acc[b % K] = _mm256_fmadd_ps(_mm256_set1_ps(scale_lo), lo, acc[b % K]);
        let k = (b + 1) % K;
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(scale_hi), hi, acc[k]);
    }
}

/// The f16 bit patterns at `p0` and `p1` as f32, in one conversion (the same exact values
/// as two calls of `half`).
///
/// # Safety
/// F16C; both pointers point at two readable bytes.
#[inline(always)]
unsafe fn halves(p0: *const u8, p1: *const u8) -> (f32, f32) {
    // SAFETY: the caller points at two readable bytes each and runs with F16C enabled.
    unsafe {
        let h0 = i32::from(u16::from_le_bytes([*p0, *p0.add(1)]));
        let h1 = i32::from(u16::from_le_bytes([*p1, *p1.add(1)]));
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(h0 | (h1 << 16)));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }
}

/// Two adjacent 256-bit halves as one 512-bit vector (`lo` in lanes 0..8).
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: register-only; the caller runs with AVX-512 F enabled.
    unsafe { _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1) }
}

/// `N` input rows from `first` against one `Q8_0` weight row: `|w|` times `x` with the sign
/// of `w` (so the unsigned-by-signed product is `w x`), two blocks per `vpdpbusd`.
///
/// # Safety
/// As for [`rows`]; `wrow` holds `act.blocks` blocks and rows `first..first + N` exist.
#[inline(always)]
unsafe fn q8<const N: usize, const K: usize>(
    wrow: &[u8],
    act: &Activations,
    first: usize,
    out: &mut [f32],
) {
    let nb = act.blocks;
    // SAFETY: every pointer below stays inside `wrow` (block b < nb of 34 bytes) or the
    // activations of rows first..first + N (checked by the caller); pairs take blocks
    // b and b + 1 < nb only.
    unsafe {
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm256_setzero_ps(); K]; N];
        let wp = wrow.as_ptr();
        let xq = act.qs.as_ptr().add(first * nb * QK);
        let xs = act.scales.as_ptr().add(first * nb);
        let mut b = 0;
        while b + 1 < nb {
            let blk = wp.add(b * 34);
            let (d0, d1) = halves(blk, blk.add(34));
            let w = join(
                _mm256_loadu_si256(blk.add(2) as *const __m256i),
                _mm256_loadu_si256(blk.add(36) as *const __m256i),
            );
            let aw = _mm512_abs_epi8(w);
            let negative = _mm512_movepi8_mask(w);
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm512_loadu_si512(xq.add((r * nb + b) * QK) as *const __m512i);
                let sx = _mm512_mask_sub_epi8(x, negative, zero, x);
                let dot = _mm512_dpbusd_epi32(zero, aw, sx);
                let s = xs.add(r * nb + b);
                add_pair::<K>(a, b, dot, d0 * *s, d1 * *s.add(1));
            }
            b += 2;
        }
        if b < nb {
            // The odd last block, in 256 bits.
            let blk = wp.add(b * 34);
            let d = half(blk);
            let w = _mm256_loadu_si256(blk.add(2) as *const __m256i);
            let aw = _mm256_abs_epi8(w);
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_si256(xq.add((r * nb + b) * QK) as *const __m256i);
                let sx = _mm256_sign_epi8(x, w);
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
                let scale = _mm256_set1_ps(d * *xs.add(r * nb + b));
                a[b % K] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), a[b % K]);
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            let mut v = a[0];
            for x in &a[1..] {
                v = _mm256_add_ps(v, *x);
            }
            *o = hsum(v);
        }
    }
}

/// The 32 four-bit values of a `Q4_1` block's 16 bytes at `q`, one per byte, in value order
/// (low nibbles are values 0..16, high nibbles 16..32).
///
/// # Safety
/// AVX2; `q` points at 16 readable bytes.
#[inline(always)]
unsafe fn nibbles(q: *const u8) -> __m256i {
    // SAFETY: the caller points at 16 readable bytes and runs with AVX2 enabled.
    unsafe {
        let q = _mm_loadu_si128(q as *const __m128i);
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
            _mm256_set1_epi8(0x0F),
        )
    }
}

/// `N` input rows from `first` against one `Q4_1` weight row (see [`q8`]); the weights'
/// values are unsigned already, and the minimum term is `avx2::q4_mins`, as there.
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
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm256_setzero_ps(); K]; N];
        let wp = wrow.as_ptr();
        let xq = act.qs.as_ptr().add(first * nb * QK);
        let xs = act.scales.as_ptr().add(first * nb);
        let mut b = 0;
        while b + 1 < nb {
            let blk = wp.add(b * 20);
            let (d0, d1) = halves(blk, blk.add(20));
            let w = join(nibbles(blk.add(4)), nibbles(blk.add(24)));
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm512_loadu_si512(xq.add((r * nb + b) * QK) as *const __m512i);
                let dot = _mm512_dpbusd_epi32(zero, w, x);
                let s = xs.add(r * nb + b);
                add_pair::<K>(a, b, dot, d0 * *s, d1 * *s.add(1));
            }
            b += 2;
        }
        if b < nb {
            // The odd last block, in 256 bits.
            let blk = wp.add(b * 20);
            let d = half(blk);
            let w = nibbles(blk.add(4));
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_si256(xq.add((r * nb + b) * QK) as *const __m256i);
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
                let scale = _mm256_set1_ps(d * *xs.add(r * nb + b));
                a[b % K] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), a[b % K]);
            }
        }
        let mins = q4_mins(wrow, act, first);
        for ((o, a), m) in out.iter_mut().zip(&acc).zip(mins) {
            let mut v = a[0];
            for x in &a[1..] {
                v = _mm256_add_ps(v, *x);
            }
            *o = hsum(v) + m;
        }
    }
}
