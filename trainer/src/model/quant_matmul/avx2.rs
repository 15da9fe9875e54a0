//! The AVX2 inner loop: 32 products of a block in one `maddubs`, up to [`GROUP`] input
//! rows per pass over a weight row, two accumulator sets when there are few rows (so the
//! FMA latency overlaps).
//!
//! The summation order here is the contract [`super::avx512`] reproduces bit for bit: per input
//! row, `K` accumulators of 8 lanes (lane `i` of block `b` holds the integer sum of the
//! products of bytes `4i..4i + 4`), block `b` added to accumulator `b % K` by one FMA with the
//! scale `d_w * d_x`, the accumulators added in order and then summed horizontally by [`hsum`]
//! (plus, for `Q4_1`, the minimum term of [`q4_mins`]).
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
pub(super) unsafe fn half(p: *const u8) -> f32 {
    // SAFETY: the caller points at two readable bytes.
    unsafe {
        let bits = i32::from(u16::from_le_bytes([*p, *p.add(1)]));
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }
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

/// `N` input rows from `first` against one `Q4_1` weight row (see [`q8`]); the minimum
/// term comes from [`q4_mins`].
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
                let blk = wp.add(bk * 20);
                let d = half(blk);
                let q = _mm_loadu_si128(blk.add(4) as *const __m128i);
                let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
                for (r, a) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(xq.add((r * nb + bk) * QK) as *const __m256i);
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
                    let scale = _mm256_set1_ps(d * *xs.add(r * nb + bk));
                    *a = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), *a);
                }
            }
            b += K;
        }
        let mins = q4_mins(wrow, act, first);
        for (r, o) in out.iter_mut().enumerate().take(N) {
            let mut v = acc[0][r];
            for a in &acc[1..] {
                v = _mm256_add_ps(v, a[r]);
            }
            *o = hsum(v) + mins[r];
        }
    }
}

/// The `Q4_1` minimum term for the [`GROUP`] input rows from `first`: lane `r` is
/// `sum over blocks b of m_b * sums[first + r][b]`, one FMA per block in block order (the
/// AVX-512 kernel calls this too, so both give the same bits). Lanes past the last row are 0.
///
/// # Safety
/// AVX2/FMA/F16C; `wrow` holds `act.blocks` blocks of 20 bytes and `first` is a multiple of
/// [`GROUP`] below `act.rows_pad`.
#[inline(always)]
pub(super) unsafe fn q4_mins(wrow: &[u8], act: &Activations, first: usize) -> [f32; GROUP] {
    // SAFETY: block b < nb lies in `wrow`; `sums_t` holds nb * rows_pad values and
    // first + GROUP <= rows_pad.
    unsafe {
        debug_assert!(first + GROUP <= act.rows_pad);
        let wp = wrow.as_ptr();
        let st = act.sums_t.as_ptr().add(first);
        let mut acc = _mm256_setzero_ps();
        for b in 0..act.blocks {
            let m = _mm256_set1_ps(half(wp.add(b * 20 + 2)));
            let s = _mm256_loadu_ps(st.add(b * act.rows_pad));
            acc = _mm256_fmadd_ps(m, s, acc);
        }
        let mut lanes = [0f32; GROUP];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        lanes
    }
}
