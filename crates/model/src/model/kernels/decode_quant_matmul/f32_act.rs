//! `x W^T` with the quantised weight blocks and f32 inputs: the weights are dequantised in
//! registers exactly as [`candle_core`]'s `dequantize` writes them (`Q8_0`: `q * d`; `Q4_1`:
//! `q * d + m`, a product and then a sum, each rounded), and multiplied with the input rows as
//! they are, by FMAs. So the product reads the same weights as the training path (which holds
//! the dequantised f32 weights), and the two differ only in the order of their f32 sums.
//!
//! The product `q * d` never rounds: `q` has at most 8 significant bits (`Q8_0`; 4 for
//! `Q4_1`) and `d`, an f16, at most 11, so it fits the 24 of an f32. The SIMD loops therefore
//! compute `q * d + m` with one FMA, which rounds once, exactly where candle's product-then-sum
//! rounds (its sum), and give the same weights.
//!
//! # The bound
//! Each of the two computes `sum_i w_i x_i` over `k` terms in some order with one rounding per
//! operation, so each lies within `gamma_k * sum_i |w_i x_i|` of the exact sum, where
//! `gamma_k = k u / (1 - k u)` and `u = 2^-24` (Higham, *Accuracy and Stability of Numerical
//! Algorithms*, 3.1). The two outputs therefore differ by at most `2 gamma_k sum |w_i x_i|`,
//! and this kernel's output lies within `gamma_k sum |w_i x_i|` of the exact product with the
//! dequantised weights, which the tests check. (The 8-bit input path of the parent module
//! adds up to `max|x| / 254 * sum |w|` per block on top, which is what made its greedy tokens
//! differ from the training path's.)
//!
//! # The summation order
//! All three loops (portable, AVX2, AVX-512) give the same bits, so a seed samples the same
//! tokens on every CPU. The order they share, per weight row and input row:
//! - `K` accumulator sets ([`sets`]: 4 for one input row, 2 for up to three, else 1), each
//!   two vectors `A` and `B` of 8 lanes, all zero; block `b` goes to set `b % K`;
//! - within a block, values `0..8` go to `A` (lane `i` takes value `i`), `8..16` to `B`, then
//!   `16..24` to `A` and `24..32` to `B`, each by one FMA `acc = w * x + acc`;
//! - at the end `t_k = A_k + B_k` (lane-wise), `v = ((t_0 + t_1) + t_2) + ...`, and the
//!   result is [`hsum8`] of `v`: `(v0 + v4) + (v2 + v6)` plus `(v1 + v5) + (v3 + v7)`.
//!
//! The AVX-512 loop holds `A` and `B` as the two halves of one 16-lane register (a block's
//! values `0..16`, then `16..32`), which gives each lane the same sequence of FMAs.
use crate::model::quant::{BlockFormat, RowPlanes, f16_bits_to_f32};

use super::QK;

/// Accumulator sets for `n` input rows (see the module documentation): more sets where
/// fewer rows leave the FMA latency exposed. A function of the row count only, so every
/// loop sums in the same order.
pub(super) fn sets(n: usize) -> usize {
    match n {
        1 => 4,
        2 | 3 => 2,
        _ => 1,
    }
}

/// The horizontal sum of 8 lanes in the order of the SIMD loops' `hsum`.
pub(super) fn hsum8(v: &[f32; 8]) -> f32 {
    let s = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (s[0] + s[2]) + (s[1] + s[3])
}

/// Checks the shapes every loop relies on; returns the number of weight rows in `w`.
pub(super) fn check(
    format: BlockFormat,
    w: &RowPlanes<'_>,
    k: usize,
    n: usize,
    xs: &[f32],
    out: &[f32],
) -> usize {
    assert!(k.is_multiple_of(QK));
    let nb = k / QK;
    let wrows = w.d.len() / nb.max(1);
    assert_eq!(w.d.len(), wrows * nb);
    assert_eq!(w.qs.len(), wrows * nb * format.value_bytes());
    if format == BlockFormat::Q4_1 {
        assert_eq!(w.m.len(), wrows * nb);
    }
    assert_eq!(xs.len(), n * k);
    assert_eq!(out.len(), wrows * n);
    wrows
}

/// `out[j * n + r] = x[r] . w[j]` for every weight row `j` of `w` and each of the `n` input
/// rows of `xs` (`k` values each), in portable Rust: the reference order, with `mul_add`
/// for the FMAs (one rounding, as the hardware's).
pub(super) fn rows_portable(
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
    let mut wv = [0f32; QK];
    let mut acc = vec![[[0f32; 8]; 2]; sets * n];
    for j in 0..wrows {
        acc.iter_mut().for_each(|a| *a = [[0.0; 8]; 2]);
        for b in 0..nb {
            dequantize_block(format, &w, j * nb + b, &mut wv);
            let set = b % sets;
            for r in 0..n {
                let x = &xs[r * k + b * QK..][..QK];
                let a = &mut acc[r * sets + set];
                for (part, (wp, xp)) in wv.chunks_exact(8).zip(x.chunks_exact(8)).enumerate() {
                    for (lane, (&w, &x)) in a[part % 2].iter_mut().zip(wp.iter().zip(xp)) {
                        *lane = w.mul_add(x, *lane);
                    }
                }
            }
        }
        for r in 0..n {
            let mut v = [0f32; 8];
            for (s, [lo, hi]) in acc[r * sets..(r + 1) * sets].iter().enumerate() {
                for ((lane, a), b) in v.iter_mut().zip(lo).zip(hi) {
                    let t = a + b;
                    *lane = if s == 0 { t } else { *lane + t };
                }
            }
            out[j * n + r] = hsum8(&v);
        }
    }
}

/// Block `block` of `w`'s planes as f32, as candle's `dequantize` writes it.
fn dequantize_block(format: BlockFormat, w: &RowPlanes<'_>, block: usize, out: &mut [f32; QK]) {
    let d = f16_bits_to_f32(w.d[block]);
    match format {
        BlockFormat::Q8_0 => {
            let qs = &w.qs[block * 32..][..32];
            for (o, &q) in out.iter_mut().zip(qs) {
                *o = f32::from(q as i8) * d;
            }
        }
        BlockFormat::Q4_1 => {
            let m = f16_bits_to_f32(w.m[block]);
            let qs = &w.qs[block * 16..][..16];
            for (i, &q) in qs.iter().enumerate() {
                out[i] = f32::from(q & 0x0F) * d + m;
                out[i + 16] = f32::from(q >> 4) * d + m;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(super) mod avx2;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(super) mod avx512;
