//! The AVX-512 VNNI inner loop: two blocks (64 bytes) of a weight row against two blocks of an
//! input row in one `vpdpbusd`, which multiplies unsigned by signed bytes and sums each four
//! products into a 32-bit lane, where AVX2 needs `maddubs` and `madd` per block.
//!
//! Its results equal [`super::avx2`]'s bit for bit: the integer sums are exact in both (a
//! lane sums four products of at most `128 * 127`), lane `i` of a block holds the sum of the
//! products of bytes `4i..4i + 4` in both, and the f32 work is the same sequence of FMAs into
//! the same `K` accumulators of 8 lanes (block `b` into accumulator `b % K`, `K` chosen from
//! the row count as there, with the same scales from [`scales`]), the accumulators added in
//! order and summed by the same [`hsum`], and the `Q4_1` minimum term is the same function.
//! So a run samples the same tokens from the same seed on CPUs with and without AVX-512.
use std::arch::x86_64::*;

use super::avx2::{AHEAD, check, hsum, q4_mins, scales};
use super::{Activations, BlockFormat, GROUP, QK};
use crate::model::quant::RowPlanes;

/// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` and each of the `n` input
/// rows.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows(
    format: BlockFormat,
    w: RowPlanes<'_>,
    act: &Activations,
    n: usize,
    out: &mut [f32],
) {
    let nb = act.blocks;
    let wrows = check(format, &w, act, n, out);
    let mut sc = vec![0f32; n * nb];
    let row_bytes = nb * format.value_bytes();
    for j in 0..wrows {
        // The same block of the row `AHEAD` rows on, to prefetch: an address past the plane
        // is only a hint (a prefetch never faults), so it is computed without `add`.
        let ahead = w.qs.as_ptr().wrapping_add((j + AHEAD) * row_bytes);
        let d = &w.d[j * nb..][..nb];
        // SAFETY: AVX2/F16C are enabled; `d` has `nb` scales and the activations `n` rows.
        unsafe { scales(d, act, n, &mut sc) };
        let cells = &mut out[j * n..(j + 1) * n];
        let mut g = 0;
        while g < n {
            let len = GROUP.min(n - g);
            let o = &mut cells[g..g + len];
            let s = &sc[g * nb..];
            // SAFETY: rows g..g + len of the activations and of `sc` exist (checked above)
            // and the weight row holds `nb` blocks. `K` per row count as in `avx2::rows`.
            unsafe {
                match format {
                    BlockFormat::Q8_0 => {
                        let q = &w.qs[j * nb * 32..][..nb * 32];
                        match len {
                            1 => q8::<1, 2>(q, ahead, s, act, g, o),
                            2 => q8::<2, 2>(q, ahead, s, act, g, o),
                            3 => q8::<3, 2>(q, ahead, s, act, g, o),
                            4 => q8::<4, 1>(q, ahead, s, act, g, o),
                            5 => q8::<5, 1>(q, ahead, s, act, g, o),
                            6 => q8::<6, 1>(q, ahead, s, act, g, o),
                            7 => q8::<7, 1>(q, ahead, s, act, g, o),
                            _ => q8::<8, 1>(q, ahead, s, act, g, o),
                        }
                    }
                    BlockFormat::Q4_1 => {
                        let q = &w.qs[j * nb * 16..][..nb * 16];
                        let m = &w.m[j * nb..][..nb];
                        match len {
                            1 => q4::<1, 2>(q, ahead, m, s, act, g, o),
                            2 => q4::<2, 2>(q, ahead, m, s, act, g, o),
                            3 => q4::<3, 2>(q, ahead, m, s, act, g, o),
                            4 => q4::<4, 1>(q, ahead, m, s, act, g, o),
                            5 => q4::<5, 1>(q, ahead, m, s, act, g, o),
                            6 => q4::<6, 1>(q, ahead, m, s, act, g, o),
                            7 => q4::<7, 1>(q, ahead, m, s, act, g, o),
                            _ => q4::<8, 1>(q, ahead, m, s, act, g, o),
                        }
                    }
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

/// Two adjacent 256-bit halves as one 512-bit vector (`lo` in lanes 0..8).
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: register-only; the caller runs with AVX-512 F enabled.
    unsafe { _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1) }
}

/// `N` input rows from `first` against one `Q8_0` weight row (`qs`: 32 bytes a block; `sc`:
/// the rows' scales): `|w|` times `x` with the sign of `w` (so the unsigned-by-signed
/// product is `w x`), two blocks per `vpdpbusd`.
///
/// # Safety
/// As for [`rows`]; `qs` holds `act.blocks` blocks, `sc` `N * act.blocks` scales and rows
/// `first..first + N` exist.
#[inline(always)]
unsafe fn q8<const N: usize, const K: usize>(
    qs: &[u8],
    ahead: *const u8,
    sc: &[f32],
    act: &Activations,
    first: usize,
    out: &mut [f32],
) {
    let nb = act.blocks;
    // SAFETY: every pointer below stays inside `qs` (block b < nb of 32 bytes), `sc` or the
    // activations of rows first..first + N (checked by the caller); pairs take blocks
    // b and b + 1 < nb only.
    unsafe {
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm256_setzero_ps(); K]; N];
        let wp = qs.as_ptr();
        let xq = act.qs.as_ptr().add(first * nb * QK);
        let scp = sc.as_ptr();
        let mut b = 0;
        while b + 1 < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 32) as *const i8);
            let w = _mm512_loadu_si512(wp.add(b * 32) as *const __m512i);
            let aw = _mm512_abs_epi8(w);
            let negative = _mm512_movepi8_mask(w);
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm512_loadu_si512(xq.add((r * nb + b) * QK) as *const __m512i);
                let sx = _mm512_mask_sub_epi8(x, negative, zero, x);
                let dot = _mm512_dpbusd_epi32(zero, aw, sx);
                let s = scp.add(r * nb + b);
                add_pair::<K>(a, b, dot, *s, *s.add(1));
            }
            b += 2;
        }
        if b < nb {
            // The odd last block, in 256 bits.
            let w = _mm256_loadu_si256(wp.add(b * 32) as *const __m256i);
            let aw = _mm256_abs_epi8(w);
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_si256(xq.add((r * nb + b) * QK) as *const __m256i);
                let sx = _mm256_sign_epi8(x, w);
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
                let scale = _mm256_set1_ps(*scp.add(r * nb + b));
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

/// `N` input rows from `first` against one `Q4_1` weight row (see [`q8`]; 16 bytes a block,
/// `m` the minimums' f16 bits); the weights' values are unsigned already, and the minimum
/// term is `avx2::q4_mins`, as there.
///
/// # Safety
/// As for [`q8`], with 16-byte blocks and `act.blocks` minimums.
#[inline(always)]
unsafe fn q4<const N: usize, const K: usize>(
    qs: &[u8],
    ahead: *const u8,
    m: &[u16],
    sc: &[f32],
    act: &Activations,
    first: usize,
    out: &mut [f32],
) {
    let nb = act.blocks;
    // SAFETY: as in `q8`, with blocks of 16 bytes.
    unsafe {
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm256_setzero_ps(); K]; N];
        let wp = qs.as_ptr();
        let xq = act.qs.as_ptr().add(first * nb * QK);
        let scp = sc.as_ptr();
        let mut b = 0;
        while b + 1 < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 16) as *const i8);
            let w = join(nibbles(wp.add(b * 16)), nibbles(wp.add(b * 16 + 16)));
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm512_loadu_si512(xq.add((r * nb + b) * QK) as *const __m512i);
                let dot = _mm512_dpbusd_epi32(zero, w, x);
                let s = scp.add(r * nb + b);
                add_pair::<K>(a, b, dot, *s, *s.add(1));
            }
            b += 2;
        }
        if b < nb {
            // The odd last block, in 256 bits.
            let w = nibbles(wp.add(b * 16));
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_si256(xq.add((r * nb + b) * QK) as *const __m256i);
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
                let scale = _mm256_set1_ps(*scp.add(r * nb + b));
                a[b % K] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), a[b % K]);
            }
        }
        for (r, (o, a)) in out.iter_mut().zip(&acc).enumerate() {
            let mut v = a[0];
            for x in &a[1..] {
                v = _mm256_add_ps(v, *x);
            }
            *o = hsum(v) + q4_mins(m, act, first + r);
        }
    }
}
