//! A LoRA adapter added inside the quantised product: `y += scale * (x A^T) B^T` for the few
//! rows of a decode step, without the two small GEMMs, the scaling and the addition that the
//! candle ops would cost per projection (their fixed overhead exceeded the arithmetic).
use candle_core::Tensor;

/// A LoRA adapter's factors: `a` `(rank, in)`, `b` `(out, rank)`, both f32 on the CPU.
#[derive(Debug, Clone, Copy)]
pub struct LoraFactors<'a> {
    /// `(rank, in_features)`.
    pub a: &'a Tensor,
    /// `(out_features, rank)`.
    pub b: &'a Tensor,
    /// `alpha / rank`.
    pub scale: f32,
}

/// `x A^T` for `x` `(rows, in)` row-major: `(rows, rank)`, row-major, so that
/// [`add_block`] takes one contiguous dot product per output cell. Each value is a [`dot`].
pub(super) fn project(x: &[f32], rows: usize, a: &[f32], rank: usize, simd: bool) -> Vec<f32> {
    let k = a.len() / rank.max(1);
    let mut out = vec![0f32; rank * rows];
    for (xr, o) in x
        .chunks_exact(k.max(1))
        .take(rows)
        .zip(out.chunks_exact_mut(rank.max(1)))
    {
        dots(xr, a, o, simd);
    }
    out
}

/// `cells[j * rows + r] += scale * (xa[r] . b[j])` for a block of output columns: `cells`
/// holds `rows` cells per column, `b_rows` the columns' factor rows (`rank` values each) and
/// `xa` the rows of [`project`]; at most one task block of columns. Each cell gets one
/// [`dot`], whichever loop computes it.
pub(super) fn add_block(
    cells: &mut [f32],
    rows: usize,
    xa: &[f32],
    b_rows: &[f32],
    scale: f32,
    simd: bool,
) {
    let rank = xa.len() / rows.max(1);
    let cols = cells.len() / rows.max(1);
    let mut d = [0f32; super::BLOCK];
    let d = &mut d[..cols];
    for r in 0..rows {
        dots(&xa[r * rank..][..rank], &b_rows[..cols * rank], d, simd);
        for (j, v) in d.iter().enumerate() {
            cells[j * rows + r] += scale * v;
        }
    }
}

/// `out[j] = dot(x, m[j])` for the rows of `m` (each as long as `x`): eight rows at a time
/// with AVX when `simd` and the length is a multiple of 8, the same bits either way.
fn dots(x: &[f32], m: &[f32], out: &mut [f32], simd: bool) {
    let k = x.len();
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    if simd && k > 0 && k.is_multiple_of(8) {
        // SAFETY: `simd` is only set when the CPU has AVX.
        #[allow(unsafe_code)]
        unsafe {
            j = dots_avx(x, m, out)
        };
    }
    for (o, row) in out[j..].iter_mut().zip(m[j * k..].chunks_exact(k.max(1))) {
        *o = dot(x, row);
    }
}

/// The AVX part of [`dots`]: every whole group of eight rows; returns the rows done.
///
/// # Safety
/// The CPU must have AVX; `x.len()` must be a nonzero multiple of 8.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx")]
unsafe fn dots_avx(x: &[f32], m: &[f32], out: &mut [f32]) -> usize {
    let k = x.len();
    let mut j = 0;
    while j + 8 <= out.len() {
        // SAFETY: AVX is enabled; the slicing checks that `m` holds rows `j..j + 8`.
        unsafe { dots8(x, &m[j * k..(j + 8) * k], &mut out[j..j + 8]) };
        j += 8;
    }
    j
}

/// Whether [`add_block`] and [`project`] may take the AVX loop.
pub(super) fn has_avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A dot product in eight partial sums (lane `i` adds the products of values `i`, `i + 8`,
/// ... by a multiply and an add, no FMA: `mul_add` is a library call on the baseline target),
/// summed as `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`, which is the order of
/// [`dots8`]'s horizontal adds, then the values past the last multiple of 8 in order.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut l = [0f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let (xt, yt) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for i in 0..8 {
            l[i] += a[i] * b[i];
        }
    }
    let mut s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (a, b) in xt.iter().zip(yt) {
        s += a * b;
    }
    s
}

/// Eight [`dot`]s of `x` with the rows of `m` (`8 * x.len()` values), bit for bit.
///
/// # Safety
/// The CPU must have AVX (inlined into an AVX function); `x.len()` must be a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[inline(always)]
unsafe fn dots8(x: &[f32], m: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let k = x.len();
    assert!(k.is_multiple_of(8) && m.len() == 8 * k && out.len() == 8);
    // SAFETY: every load reads 8 values at an offset below `k - 7` of `x` or of one of the
    // eight rows of `m`; the store writes `out`'s 8 values.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in (0..k).step_by(8) {
            let xv = _mm256_loadu_ps(x.as_ptr().add(c));
            for (i, a) in acc.iter_mut().enumerate() {
                let mv = _mm256_loadu_ps(m.as_ptr().add(i * k + c));
                *a = _mm256_add_ps(*a, _mm256_mul_ps(xv, mv));
            }
        }
        // Per 128-bit half, hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3]: two rounds give each
        // row's (l0+l1)+(l2+l3) in the low half and (l4+l5)+(l6+l7) in the high half.
        let lo = _mm256_hadd_ps(
            _mm256_hadd_ps(acc[0], acc[1]),
            _mm256_hadd_ps(acc[2], acc[3]),
        );
        let hi = _mm256_hadd_ps(
            _mm256_hadd_ps(acc[4], acc[5]),
            _mm256_hadd_ps(acc[6], acc[7]),
        );
        let first = _mm256_permute2f128_ps(lo, hi, 0x20);
        let second = _mm256_permute2f128_ps(lo, hi, 0x31);
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(first, second));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_and_add_column_compute_the_low_rank_update() {
        // x (2 x 3), A (2 x 3), B (1 x 2): by hand, x A^T = [[1*1 + 2*0 + 3*2, 1*(-1) + 2*1 + 3*0],
        // [0 + 0 + 2*2, 0 + 1 + 0]] = [[7, 1], [4, 1]]; then (x A^T) B^T with B = [0.5, -2]
        // is [7*0.5 - 2*1, 4*0.5 - 2*1] = [1.5, 0]; scaled by 2 and added to [10, 20]:
        // [13, 20].
        let x = [1.0, 2.0, 3.0, 0.0, 1.0, 2.0];
        let a = [1.0, 0.0, 2.0, -1.0, 1.0, 0.0];
        let xa = project(&x, 2, &a, 2, has_avx());
        // Row-major: one row of `rank` values per input row.
        assert_eq!(xa, vec![7.0, 1.0, 4.0, 1.0]);
        // One output column, two input rows.
        let mut cells = [10.0, 20.0];
        add_block(&mut cells, 2, &xa, &[0.5, -2.0], 2.0, has_avx());
        assert_eq!(cells, [13.0, 20.0]);
    }

    #[test]
    fn the_avx_loop_gives_the_bits_of_the_scalar_one() {
        // Values spread over many magnitudes, so that any other summation order would
        // round differently somewhere; 13 rows: one group of eight, five left over.
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let e = (seed >> 28) as i32 - 8;
            (f64::from(seed >> 8) / f64::from(1u32 << 24) - 0.5) as f32 * 2f32.powi(e)
        };
        for k in [8, 24, 64] {
            let x: Vec<f32> = (0..k).map(|_| next()).collect();
            let m: Vec<f32> = (0..13 * k).map(|_| next()).collect();
            let want: Vec<u32> = m.chunks_exact(k).map(|r| dot(&x, r).to_bits()).collect();
            let mut got = vec![0f32; 13];
            dots(&x, &m, &mut got, has_avx());
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "k = {k}");
        }
        // The order is the documented tree: lanes 0..8 of one chunk hold 1e8, 1, -1e8, 1,
        // 0, 0, 0, 0: (1e8 + 1) + (-1e8 + 1) = 0 in f32, where a running sum would give 1.
        let x = [1e8f32, 1.0, -1e8, 1.0, 0.0, 0.0, 0.0, 0.0];
        assert_eq!(dot(&x, &[1.0; 8]), 0.0);
    }

    #[test]
    fn dot_covers_whole_lanes_and_the_remainder() {
        let x: Vec<f32> = (1..=19).map(|v| v as f32).collect();
        let y = vec![1.0f32; 19];
        assert_eq!(dot(&x, &y), 190.0);
    }
}
