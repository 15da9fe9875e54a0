//! The AVX-512 loop of [`super`]: a block's 32 weights dequantised into two registers of 16
//! lanes (values `0..16`, `16..32`), then two FMAs per input row into one 16-lane accumulator
//! per set, whose low half is the shared order's `A` and high half its `B`: lane `i < 8`
//! takes value `i`, then `16 + i`; lane `8 + i` takes `8 + i`, then `24 + i`, as in the AVX2
//! loop. Up to [`GROUP`] rows share each dequantised block.
use std::arch::x86_64::*;

use super::super::{GROUP, QK};
use super::avx2::halves;
use super::{check, sets};
use crate::model::kernels::decode_quant_matmul::avx2::{AHEAD, hsum};
use crate::model::quant::{BlockFormat, RowPlanes};

/// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` and each of the `n` input
/// rows of `xs` (`k` values each).
///
/// # Safety
/// The CPU must have AVX-512 F, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) unsafe fn rows(
    format: BlockFormat,
    w: RowPlanes<'_>,
    xs: &[f32],
    k: usize,
    n: usize,
    out: &mut [f32],
) {
    let wrows = check(format, &w, k, n, xs, out);
    let nb = k / QK;
    let sets = sets(n);
    let mut d = vec![0f32; nb];
    let mut m = vec![0f32; nb];
    let row_bytes = nb * format.value_bytes();
    for j in 0..wrows {
        let ahead = w.qs.as_ptr().wrapping_add((j + AHEAD) * row_bytes);
        // SAFETY: F16C is enabled; both planes hold `nb` halves for row `j`.
        unsafe {
            halves(&w.d[j * nb..][..nb], &mut d);
            if format == BlockFormat::Q4_1 {
                halves(&w.m[j * nb..][..nb], &mut m);
            }
        }
        let qs = w.qs[j * row_bytes..][..row_bytes].as_ptr();
        let cells = &mut out[j * n..(j + 1) * n];
        let mut g = 0;
        while g < n {
            let len = GROUP.min(n - g);
            let x = xs[g * k..].as_ptr();
            let o = &mut cells[g..g + len];
            // SAFETY: rows g..g + len of `xs` exist (checked), the weight row holds `nb`
            // blocks and `d`, `m` hold `nb` values.
            unsafe {
                macro_rules! go {
                    ($n:literal, $k:literal) => {
                        match format {
                            BlockFormat::Q8_0 => q8::<$n, $k>(qs, ahead, &d, x, k, o),
                            BlockFormat::Q4_1 => q4::<$n, $k>(qs, ahead, &d, &m, x, k, o),
                        }
                    };
                }
                match (len, sets) {
                    (1, 4) => go!(1, 4),
                    (2, 2) => go!(2, 2),
                    (3, 2) => go!(3, 2),
                    (1, _) => go!(1, 1),
                    (2, _) => go!(2, 1),
                    (3, _) => go!(3, 1),
                    (4, _) => go!(4, 1),
                    (5, _) => go!(5, 1),
                    (6, _) => go!(6, 1),
                    (7, _) => go!(7, 1),
                    _ => go!(8, 1),
                }
            }
            g += len;
        }
    }
}

/// Adds block `b`'s two weight registers (values `0..16`, `16..32`) times each of the `N`
/// rows' inputs into the rows' set `s`.
///
/// # Safety
/// AVX-512 F; rows `0..N` of `x` (stride `k`) hold block `b`.
#[inline(always)]
unsafe fn fma_block<const N: usize, const K: usize>(
    acc: &mut [[__m512; K]; N],
    s: usize,
    w: [__m512; 2],
    x: *const f32,
    k: usize,
    b: usize,
) {
    // SAFETY: the caller guarantees rows 0..N of `x` hold block `b`.
    unsafe {
        for (r, a) in acc.iter_mut().enumerate() {
            let x = x.add(r * k + b * QK);
            a[s] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(x), a[s]);
            a[s] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(x.add(16)), a[s]);
        }
    }
}

/// Each row's result: `t_s` = the low half plus the high half of set `s`, summed over the
/// sets in order, then the AVX2 loop's `hsum`.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn finish<const N: usize, const K: usize>(acc: &[[__m512; K]; N], out: &mut [f32]) {
    // SAFETY: register-only arithmetic; the caller runs with AVX-512 F enabled.
    unsafe {
        let half = |v: __m512| {
            let lo = _mm512_castps512_ps256(v);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
            _mm256_add_ps(lo, hi)
        };
        for (o, a) in out.iter_mut().zip(acc) {
            let mut v = half(a[0]);
            for s in &a[1..] {
                v = _mm256_add_ps(v, half(*s));
            }
            *o = hsum(v);
        }
    }
}

/// `N` input rows (from `x`, stride `k`) against one `Q8_0` weight row (`qs`: 32 bytes a
/// block; `d`: its scales as f32), `K` sets.
///
/// # Safety
/// AVX-512 F; `qs` holds `d.len()` blocks and rows `0..N` of `x` hold as many.
#[inline(always)]
unsafe fn q8<const N: usize, const K: usize>(
    qs: *const u8,
    ahead: *const u8,
    d: &[f32],
    x: *const f32,
    k: usize,
    out: &mut [f32],
) {
    let nb = d.len();
    // SAFETY: blocks b < nb lie in `qs` and in every row of `x`.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); K]; N];
        let mut b = 0;
        while b < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 32) as *const i8);
            for s in 0..K {
                let bk = b + s;
                if bk >= nb {
                    break;
                }
                let q = qs.add(bk * 32);
                let dv = _mm512_set1_ps(d[bk]);
                let lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(q as *const __m128i));
                let hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(q.add(16) as *const __m128i));
                let w = [
                    _mm512_mul_ps(_mm512_cvtepi32_ps(lo), dv),
                    _mm512_mul_ps(_mm512_cvtepi32_ps(hi), dv),
                ];
                fma_block(&mut acc, s, w, x, k, bk);
            }
            b += K;
        }
        finish(&acc, out);
    }
}

/// `N` input rows against one `Q4_1` weight row (`qs`: 16 bytes a block, low nibbles values
/// `0..16`, high nibbles `16..32`; `d`, `m`: scales and minimums as f32), `K` sets.
///
/// # Safety
/// As for [`q8`], with 16-byte blocks and `d.len()` minimums in `m`.
#[inline(always)]
unsafe fn q4<const N: usize, const K: usize>(
    qs: *const u8,
    ahead: *const u8,
    d: &[f32],
    m: &[f32],
    x: *const f32,
    k: usize,
    out: &mut [f32],
) {
    let nb = d.len();
    // SAFETY: blocks b < nb lie in `qs`, `m` and every row of `x`.
    unsafe {
        let low = _mm512_set1_epi32(0x0F);
        let mut acc = [[_mm512_setzero_ps(); K]; N];
        let mut b = 0;
        while b < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 16) as *const i8);
            for s in 0..K {
                let bk = b + s;
                if bk >= nb {
                    break;
                }
                let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs.add(bk * 16) as *const __m128i));
                let dv = _mm512_set1_ps(d[bk]);
                let mv = _mm512_set1_ps(m[bk]);
                // One FMA for `q * d + m`: the product is exact (see the parent module). (A
                // lookup of the block's 16 weights by permutation, two instructions fewer a
                // block, measured within the noise of this in `examples/quant_kernels`.)
                let w = [
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, low)), dv, mv),
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), dv, mv),
                ];
                fma_block(&mut acc, s, w, x, k, bk);
            }
            b += K;
        }
        finish(&acc, out);
    }
}
