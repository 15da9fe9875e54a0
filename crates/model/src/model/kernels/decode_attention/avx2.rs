//! The AVX2 loop of [`super::attend_one`] for head sizes that are a multiple of 8: four keys'
//! dot products summed horizontally together (one reduction for four keys instead of a chain
//! of adds per key), the softmax's `exp` eight lanes at a time, and the weighted sum of values
//! with the weights normalised once.
use std::arch::x86_64::*;

use super::Group;

/// Writes the attention output of every query of `group` into `out` (back to back). Each
/// query's arithmetic is the same whatever the other queries of the group are.
///
/// # Safety
/// The CPU must have AVX2 and FMA, and `group.dim` must be a multiple of 8.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn attend(group: &Group, out: &mut [f32]) {
    let d = group.dim;
    assert!(
        d.is_multiple_of(8) && d > 0,
        "head size {d} is not a multiple of 8"
    );
    let n = group.queries.len() / d;
    let slots = group.slots;
    assert!(out.len() == n * d);
    assert!(slots == 0 || group.keys.len() >= (slots - 1) * group.key_stride + d);
    assert!(slots == 0 || group.values.len() >= (slots - 1) * group.value_stride + d);
    assert!(group.mask.is_none_or(|m| m.len() >= slots));
    let key = |j: usize| group.keys[j * group.key_stride..][..d].as_ptr();
    let mut scores = vec![0f32; n * slots];
    // SAFETY: every pointer below comes from a slice of at least `d` (keys, values, queries,
    // outputs) or `slots` (scores, mask) values checked above, and loads stay inside them.
    unsafe {
        let scale = _mm_set1_ps(group.scale);
        let mut j = 0;
        while j + 4 <= slots {
            let ks = [key(j), key(j + 1), key(j + 2), key(j + 3)];
            for (r, query) in group.queries.chunks_exact(d).enumerate() {
                let q = query.as_ptr();
                let mut acc = [_mm256_setzero_ps(); 4];
                for c in (0..d).step_by(8) {
                    let qv = _mm256_loadu_ps(q.add(c));
                    for (a, k) in acc.iter_mut().zip(ks) {
                        *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k.add(c)), *a);
                    }
                }
                let mut s = _mm_mul_ps(hsum4(acc), scale);
                if let Some(m) = group.mask {
                    s = _mm_add_ps(s, _mm_loadu_ps(m.as_ptr().add(j)));
                }
                _mm_storeu_ps(scores.as_mut_ptr().add(r * slots + j), s);
            }
            j += 4;
        }
        for j in j..slots {
            let k = key(j);
            let bias = group.mask.map_or(0.0, |m| m[j]);
            for (r, query) in group.queries.chunks_exact(d).enumerate() {
                let q = query.as_ptr();
                let mut a = _mm256_setzero_ps();
                for c in (0..d).step_by(8) {
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(c)), _mm256_loadu_ps(k.add(c)), a);
                }
                scores[r * slots + j] = hsum(a) * group.scale + bias;
            }
        }
        let mut inv = vec![0f32; n];
        for (row, inv) in scores.chunks_exact_mut(slots.max(1)).zip(inv.iter_mut()) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let vmax = _mm256_set1_ps(max);
            let mut total = _mm256_setzero_ps();
            let mut chunks = row.chunks_exact_mut(8);
            for c in &mut chunks {
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), vmax));
                _mm256_storeu_ps(c.as_mut_ptr(), e);
                total = _mm256_add_ps(total, e);
            }
            let mut total = hsum(total);
            for s in chunks.into_remainder() {
                *s = (*s - max).exp();
                total += *s;
            }
            *inv = 1.0 / total;
        }
        out.fill(0.0);
        for j in 0..slots {
            let v = group.values[j * group.value_stride..][..d].as_ptr();
            for (r, o) in out.chunks_exact_mut(d).enumerate() {
                let p = scores[r * slots + j];
                if p == 0.0 {
                    continue;
                }
                let w = _mm256_set1_ps(p * inv[r]);
                let o = o.as_mut_ptr();
                for c in (0..d).step_by(8) {
                    let acc = _mm256_loadu_ps(o.add(c));
                    _mm256_storeu_ps(o.add(c), _mm256_fmadd_ps(w, _mm256_loadu_ps(v.add(c)), acc));
                }
            }
        }
    }
}

/// The horizontal sums of four vectors, in order.
#[target_feature(enable = "avx2,fma")]
fn hsum4(a: [__m256; 4]) -> __m128 {
    let t0 = _mm256_hadd_ps(a[0], a[1]);
    let t1 = _mm256_hadd_ps(a[2], a[3]);
    let t = _mm256_hadd_ps(t0, t1);
    _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1))
}

/// The horizontal sum of one vector.
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `exp` of eight lanes (Cephes' single-precision polynomial, within about 2 ulp of the
/// exact value over the range used here). Inputs at or below -88.37, -inf included, give
/// exactly 0; softmax inputs are at most 0, so the upper clamp never changes a result.
#[target_feature(enable = "avx2,fma")]
fn exp8(x: __m256) -> __m256 {
    let x = _mm256_min_ps(x, _mm256_set1_ps(88.376_26));
    let x = _mm256_max_ps(x, _mm256_set1_ps(-88.376_26));
    let fx = _mm256_floor_ps(_mm256_fmadd_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
        _mm256_set1_ps(0.5),
    ));
    let x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693_359_4), x);
    let x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.121_944_4e-4), x);
    let z = _mm256_mul_ps(x, x);
    let mut y = _mm256_set1_ps(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ] {
        y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(_mm256_fmadd_ps(y, z, x), _mm256_set1_ps(1.0));
    // 2^fx through the exponent bits; fx = -127 (the lowest after the clamp) gives 0.
    let e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)),
        23,
    );
    _mm256_mul_ps(y, _mm256_castsi256_ps(e))
}

#[cfg(test)]
mod tests {
    use std::arch::x86_64::*;

    use super::exp8;

    #[test]
    fn exp8_is_close_to_exp_and_masked_inputs_give_zero() {
        if !super::super::has_avx2_fma() {
            return;
        }
        let xs: Vec<f32> = (0..8000).map(|i| -87.0 + i as f32 * 0.011).collect();
        for c in xs.chunks_exact(8) {
            let mut got = [0f32; 8];
            // SAFETY: the CPU has AVX2 and FMA; both pointers cover eight values.
            #[allow(unsafe_code)]
            unsafe {
                _mm256_storeu_ps(got.as_mut_ptr(), exp8(_mm256_loadu_ps(c.as_ptr())))
            };
            for (&x, &g) in c.iter().zip(&got) {
                let want = x.exp();
                assert!(
                    (g - want).abs() <= 4.0 * f32::EPSILON * want,
                    "exp({x}) = {want}, got {g}"
                );
            }
        }
        let masked = [
            f32::NEG_INFINITY,
            -88.4,
            -100.0,
            -1e30,
            f32::NEG_INFINITY,
            -89.0,
            -200.0,
            -88.38,
        ];
        let mut got = [1f32; 8];
        // SAFETY: as above.
        #[allow(unsafe_code)]
        unsafe {
            _mm256_storeu_ps(got.as_mut_ptr(), exp8(_mm256_loadu_ps(masked.as_ptr())))
        };
        assert_eq!(got, [0.0; 8]);
    }
}
