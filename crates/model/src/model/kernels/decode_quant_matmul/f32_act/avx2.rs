//! The AVX2 loop of [`super`]: a block's 32 weights dequantised into four registers of 8
//! lanes, then one FMA per register and input row, in the shared order (values `0..8` and
//! `16..24` into accumulator `A`, `8..16` and `24..32` into `B`). Rows go through in chunks
//! of up to [`CHUNK`], so that `2 K` accumulators per row, the four weights and the constants
//! fit in 16 registers.
use std::arch::x86_64::*;

use super::super::QK;
use super::{check, sets};
use crate::model::kernels::decode_quant_matmul::avx2::{AHEAD, hsum};
use crate::model::quant::{BlockFormat, RowPlanes};

/// Input rows per pass over a weight row when every row has one accumulator set.
const CHUNK: usize = 4;

/// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` and each of the `n` input
/// rows of `xs` (`k` values each).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
            let len = if sets == 1 { CHUNK.min(n - g) } else { n - g };
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
                    _ => go!(4, 1),
                }
            }
            g += len;
        }
    }
}

/// f16 bit patterns as f32, eight per conversion (exact, as every f16 is an f32).
///
/// # Safety
/// F16C; `out` is as long as `bits`.
#[inline(always)]
pub(crate) unsafe fn halves(bits: &[u16], out: &mut [f32]) {
    assert_eq!(bits.len(), out.len());
    let mut i = 0;
    // SAFETY: every access is below `bits.len()`.
    unsafe {
        while i + 8 <= bits.len() {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr().add(i) as *const __m128i));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            i += 8;
        }
    }
    for (o, &b) in out[i..].iter_mut().zip(&bits[i..]) {
        *o = crate::model::quant::f16_bits_to_f32(b);
    }
}

/// Adds block `b`'s four weight registers (values `0..8`, `8..16`, `16..24`, `24..32`) times
/// each of the `N` rows' inputs into the rows' set `s`.
///
/// # Safety
/// AVX2 and FMA; rows `0..N` of `x` (stride `k`) hold block `b`.
#[inline(always)]
unsafe fn fma_block<const N: usize, const K: usize>(
    acc: &mut [[[__m256; 2]; K]; N],
    s: usize,
    w: [__m256; 4],
    x: *const f32,
    k: usize,
    b: usize,
) {
    // SAFETY: the caller guarantees rows 0..N of `x` hold block `b`.
    unsafe {
        for (r, a) in acc.iter_mut().enumerate() {
            let x = x.add(r * k + b * QK);
            let a = &mut a[s];
            a[0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x), a[0]);
            a[1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x.add(8)), a[1]);
            a[0] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x.add(16)), a[0]);
            a[1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x.add(24)), a[1]);
        }
    }
}

/// Each row's result from its sets: `t_s = A_s + B_s`, summed over the sets in order, then
/// [`hsum`].
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn finish<const N: usize, const K: usize>(acc: &[[[__m256; 2]; K]; N], out: &mut [f32]) {
    // SAFETY: register-only arithmetic; the caller runs with AVX2 enabled.
    unsafe {
        for (o, a) in out.iter_mut().zip(acc) {
            let mut v = _mm256_add_ps(a[0][0], a[0][1]);
            for s in &a[1..] {
                v = _mm256_add_ps(v, _mm256_add_ps(s[0], s[1]));
            }
            *o = hsum(v);
        }
    }
}

/// `N` input rows (from `x`, stride `k`) against one `Q8_0` weight row (`qs`: 32 bytes a
/// block; `d`: its scales as f32), `K` sets.
///
/// # Safety
/// AVX2/FMA; `qs` holds `d.len()` blocks and rows `0..N` of `x` hold as many.
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
        let mut acc = [[[_mm256_setzero_ps(); 2]; K]; N];
        let mut b = 0;
        while b < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 32) as *const i8);
            for s in 0..K {
                let bk = b + s;
                if bk >= nb {
                    break;
                }
                let q = qs.add(bk * 32);
                let dv = _mm256_broadcast_ss(&d[bk]);
                // Written out, not through `array::map`, whose closure was not inlined: its
                // calls made the AVX2 step of one row 2.4x slower in `examples/quant_kernels`.
                let deq = |o: usize| {
                    let v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(q.add(o) as *const __m128i));
                    _mm256_mul_ps(_mm256_cvtepi32_ps(v), dv)
                };
                let w = [deq(0), deq(8), deq(16), deq(24)];
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
        let low = _mm256_set1_epi32(0x0F);
        let mut acc = [[[_mm256_setzero_ps(); 2]; K]; N];
        let mut b = 0;
        while b < nb {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(b * 16) as *const i8);
            for s in 0..K {
                let bk = b + s;
                if bk >= nb {
                    break;
                }
                let q = _mm_loadu_si128(qs.add(bk * 16) as *const __m128i);
                let q0 = _mm256_cvtepu8_epi32(q);
                let q1 = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(q, q));
                let dv = _mm256_broadcast_ss(&d[bk]);
                let mv = _mm256_broadcast_ss(&m[bk]);
                // One FMA for `q * d + m`: the product is exact (see the parent module).
                let deq = |v: __m256i| _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), dv, mv);
                let w = [
                    deq(_mm256_and_si256(q0, low)),
                    deq(_mm256_and_si256(q1, low)),
                    deq(_mm256_srli_epi32(q0, 4)),
                    deq(_mm256_srli_epi32(q1, 4)),
                ];
                fma_block(&mut acc, s, w, x, k, bk);
            }
            b += K;
        }
        finish(&acc, out);
    }
}
