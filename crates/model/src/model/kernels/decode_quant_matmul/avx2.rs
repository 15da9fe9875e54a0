//! The AVX2 inner loop: 32 products of a block in one `maddubs`, up to [`GROUP`] input
//! rows per pass over a weight row, two accumulator sets when there are few rows (so the
//! FMA latency overlaps).
//!
//! The summation order here is the contract [`super::avx512`] reproduces bit for bit: per input
//! row, `K` accumulators of 8 lanes (lane `i` of block `b` holds the integer sum of the
//! products of bytes `4i..4i + 4`), block `b` added to accumulator `b % K` by one FMA with the
//! scale `d_w * d_x` (from [`scales`]), the accumulators added in order and then summed
//! horizontally by [`hsum`] (plus, for `Q4_1`, the minimum term of [`q4_mins`]).
use std::arch::x86_64::*;

use super::{Activations, BlockFormat, GROUP, QK};
use crate::model::quant::RowPlanes;

/// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` and each of the `n` input
/// rows.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
        // As in the AVX-512 kernel: the same block `AHEAD` rows on, only a hint.
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
            // and the weight row holds `nb` blocks. `K` per row count: two accumulator sets
            // for up to three rows.
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

/// [`super::quantize_block`] eight values at a time, with the same bytes, scale and sum.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_block(block: &[f32], q: &mut [i8]) -> (f32, f32) {
    assert!(block.len() == QK && q.len() == QK);
    // SAFETY: four loads of 8 values inside the 32 of `block`, one store of 32 bytes into `q`.
    unsafe {
        let p = block.as_ptr();
        let v = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(p.add(o)));
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        // `max(abs, m)` returns `m` for a NaN `abs`, as `f32::max` ignores NaN.
        let mut m = _mm256_setzero_ps();
        for x in v {
            m = _mm256_max_ps(_mm256_and_ps(x, abs), m);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        let amax = lanes.iter().fold(0f32, |a, &b| a.max(b));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (vid, lo, hi) = (
            _mm256_set1_ps(id),
            _mm256_set1_ps(-128.0),
            _mm256_set1_ps(127.0),
        );
        let (half, neg_half, one) = (
            _mm256_set1_ps(0.5),
            _mm256_set1_ps(-0.5),
            _mm256_set1_ps(1.0),
        );
        let mut sum = _mm256_setzero_si256();
        let r = v.map(|x| {
            // The clamp keeps NaN (it is the second operand), which the mask then zeroes.
            let y = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(x, vid)));
            let y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));
            let t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            let f = _mm256_sub_ps(y, t);
            let up = _mm256_and_ps(_mm256_cmp_ps(f, half, _CMP_GE_OQ), one);
            let down = _mm256_and_ps(_mm256_cmp_ps(f, neg_half, _CMP_LE_OQ), one);
            let ri = _mm256_cvtps_epi32(_mm256_sub_ps(_mm256_add_ps(t, up), down));
            sum = _mm256_add_epi32(sum, ri);
            ri
        });
        // packs work per 128-bit half: the bytes come out as r0[0..4] r1[0..4] r2[0..4]
        // r3[0..4] r0[4..8] ..., which the permutation puts back in order.
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(r[0], r[1]),
            _mm256_packs_epi32(r[2], r[3]),
        );
        let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, bytes);
        let mut s = [0i32; 8];
        _mm256_storeu_si256(s.as_mut_ptr() as *mut __m256i, sum);
        (d, d * s.iter().sum::<i32>() as f32)
    }
}

/// How many weight rows ahead both SIMD kernels prefetch the weights' bytes, one prefetch per
/// step of their block loop (the same block of a later row). In the G=1 profile a third of
/// the AVX-512 kernel's samples sat on its weight loads; with the prefetch, a sixth. Every
/// row of a task is read in order, so four rows (1,152 bytes of SmolLM2's Q4_1 projections)
/// ahead covers the memory latency of about four rows' work. Prefetching changes no result.
pub(super) const AHEAD: usize = 4;

/// Checks the shapes both SIMD kernels rely on; returns the number of weight rows.
pub(super) fn check(
    format: BlockFormat,
    w: &RowPlanes<'_>,
    act: &Activations,
    n: usize,
    out: &[f32],
) -> usize {
    let nb = act.blocks;
    let wrows = w.d.len() / nb.max(1);
    assert_eq!(w.d.len(), wrows * nb);
    assert_eq!(w.qs.len(), wrows * nb * format.value_bytes());
    if format == BlockFormat::Q4_1 {
        assert_eq!(w.m.len(), wrows * nb);
    }
    assert_eq!(act.qs.len(), n * nb * QK);
    assert_eq!(act.scales.len(), n * nb);
    assert_eq!(act.sums.len(), n * nb);
    assert_eq!(out.len(), wrows * n);
    wrows
}

/// `sc[r * nb + b] = d_w[b] * d_x[r][b]` for the weight row's scales `d` (f16 bits) and
/// each of the `n` input rows: eight scales per conversion and multiplication, the same
/// products as converting and multiplying one at a time.
///
/// # Safety
/// AVX2 and F16C; `d` holds `act.blocks` scales, the activations `n` rows and `sc` at least
/// `n * act.blocks` values.
#[inline(always)]
pub(super) unsafe fn scales(d: &[u16], act: &Activations, n: usize, sc: &mut [f32]) {
    let nb = act.blocks;
    // SAFETY: every access is below `nb` in `d` and below `n * nb` in the activations'
    // scales and in `sc`.
    unsafe {
        let mut b = 0;
        while b + 8 <= nb {
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().add(b) as *const __m128i));
            for r in 0..n {
                let i = r * nb + b;
                let sx = _mm256_loadu_ps(act.scales.as_ptr().add(i));
                _mm256_storeu_ps(sc.as_mut_ptr().add(i), _mm256_mul_ps(dw, sx));
            }
            b += 8;
        }
        while b < nb {
            let dw = half(d[b]);
            for r in 0..n {
                let i = r * nb + b;
                sc[i] = dw * act.scales[i];
            }
            b += 1;
        }
    }
}

/// One f16 bit pattern as f32, through F16C.
#[inline(always)]
pub(super) unsafe fn half(bits: u16) -> f32 {
    // SAFETY: register-only F16C conversion; the caller runs with F16C enabled.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits)))) }
}

#[inline(always)]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: register-only AVX arithmetic; the caller runs with AVX2 enabled.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// `N` input rows from `first` against one `Q8_0` weight row (`qs`: its blocks' 32 bytes
/// each; `sc`: the scales of rows `first..first + N`, from [`scales`]), with `K` accumulator
/// sets taking alternate blocks.
///
/// # Safety
/// AVX2/FMA/F16C; `qs` holds `act.blocks` blocks, `sc` `N * act.blocks` scales, and rows
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
    // activations of rows first..first + N (checked by the caller).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); N]; K];
        let wp = qs.as_ptr();
        let xq = act.qs.as_ptr().add(first * nb * QK);
        let scp = sc.as_ptr();
        let mut b = 0;
        while b < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 32) as *const i8);
            for (k, acc) in acc.iter_mut().enumerate() {
                let bk = b + k;
                if bk >= nb {
                    break;
                }
                let w = _mm256_loadu_si256(wp.add(bk * 32) as *const __m256i);
                let aw = _mm256_sign_epi8(w, w);
                for (r, a) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(xq.add((r * nb + bk) * QK) as *const __m256i);
                    let sx = _mm256_sign_epi8(x, w);
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                    let scale = _mm256_broadcast_ss(&*scp.add(r * nb + bk));
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

/// `N` input rows from `first` against one `Q4_1` weight row (see [`q8`]; `qs` holds 16
/// bytes a block, `m` the minimums' f16 bits); the minimum term comes from [`q4_mins`].
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
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0x0F);
        let mut acc = [[_mm256_setzero_ps(); N]; K];
        let wp = qs.as_ptr();
        let xq = act.qs.as_ptr().add(first * nb * QK);
        let scp = sc.as_ptr();
        let mut b = 0;
        while b < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 16) as *const i8);
            for (k, acc) in acc.iter_mut().enumerate() {
                let bk = b + k;
                if bk >= nb {
                    break;
                }
                let q = _mm_loadu_si128(wp.add(bk * 16) as *const __m128i);
                let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
                for (r, a) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(xq.add((r * nb + bk) * QK) as *const __m256i);
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
                    let scale = _mm256_broadcast_ss(&*scp.add(r * nb + bk));
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
            *o = hsum(v) + q4_mins(m, act, first + r);
        }
    }
}

/// The `Q4_1` minimum term of input row `row`: `sum over blocks b of m_b * sums[row][b]`,
/// blocks `b < nb - nb % 8` accumulated in lane `b % 8` by one FMA per eight blocks and
/// summed by [`hsum`], then the remaining blocks added in order (the AVX-512 kernel calls
/// this too, so both give the same bits).
///
/// # Safety
/// AVX2/FMA/F16C; `m` holds `act.blocks` minimums and row `row` of the activations exists.
#[inline(always)]
pub(super) unsafe fn q4_mins(m: &[u16], act: &Activations, row: usize) -> f32 {
    let nb = act.blocks;
    // SAFETY: block b < nb lies in `m` and in row `row` of the activations' sums.
    unsafe {
        let s = act.sums.as_ptr().add(row * nb);
        let mut acc = _mm256_setzero_ps();
        let mut b = 0;
        while b + 8 <= nb {
            let mv = _mm256_cvtph_ps(_mm_loadu_si128(m.as_ptr().add(b) as *const __m128i));
            acc = _mm256_fmadd_ps(mv, _mm256_loadu_ps(s.add(b)), acc);
            b += 8;
        }
        let mut total = hsum(acc);
        while b < nb {
            total += half(m[b]) * *s.add(b);
            b += 1;
        }
        total
    }
}
