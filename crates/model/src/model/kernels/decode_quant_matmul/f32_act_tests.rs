//! The f32-input product against the bound its module states, written from the block layout
//! and from candle's dequantisation (not from the kernels), and the three loops against each
//! other bit for bit.
#![allow(clippy::needless_range_loop)] // indices name the row and column of a product
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::tests::{Lcg, kernels, write_blocks};
use super::{Kernel, matmul_t_with};
use crate::model::decode_weights::DecodeActivations;
use crate::model::quant::{BlockFormat, QuantWeight};

const F32: DecodeActivations = DecodeActivations::F32;

/// `gamma_k = k u / (1 - k u)` with `u = 2^-24`: a sum of `k` products in f32 in any order
/// lies within `gamma_k * sum |w_i x_i|` of the exact one (Higham, 3.1).
fn gamma(k: usize) -> f64 {
    let ku = k as f64 * f64::powi(2.0, -24);
    ku / (1.0 - ku)
}

/// Every output of every loop lies within `gamma_k sum |w x|` of the exact product with the
/// weights the blocks encode (by the GGML layout, in f64; the hand-written scales make the
/// f32 dequantisation exact, so the weights are the same). The 8-bit input path breaks this
/// bound on the same data, so the check tells the two apart.
#[test]
fn f32_inputs_stay_within_the_summation_order_bound() {
    let mut rng = Lcg(21);
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        let mut q8_outside = 0;
        for (n_rows, nb, n) in [
            (1, 1, 3),
            (1, 18, 40),
            (2, 3, 33),
            (3, 5, 9),
            (4, 2, 7),
            (5, 4, 6),
            (8, 18, 37),
            (11, 7, 5),
        ] {
            let k = nb * 32;
            let (bytes, w) = write_blocks(format, n, nb, &mut rng);
            let q = QuantWeight::from_bytes(format, n, k, bytes).unwrap();
            let x: Vec<f32> = (0..n_rows * k).map(|_| rng.unit() * 3.0).collect();
            let xt = Tensor::from_vec(x.clone(), (n_rows, k), &Device::Cpu).unwrap();
            let exact = |r: usize, j: usize| -> (f64, f64) {
                let (xr, wj) = (&x[r * k..][..k], &w[j * k..][..k]);
                let terms = xr.iter().zip(wj).map(|(&a, &c)| f64::from(a) * c);
                terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()))
            };
            for kernel in kernels() {
                let got: Vec<Vec<f32>> = matmul_t_with(&q, &xt, kernel, F32, None)
                    .unwrap()
                    .to_vec2()
                    .unwrap();
                for r in 0..n_rows {
                    for j in 0..n {
                        let (want, mag) = exact(r, j);
                        let bound = gamma(k) * mag;
                        let d = (f64::from(got[r][j]) - want).abs();
                        assert!(
                            d <= bound,
                            "{kernel:?} {format:?} {n_rows}x{k}x{n} [{r},{j}]: |{} - {want}| > {bound}",
                            got[r][j]
                        );
                    }
                }
            }
            let q8: Vec<Vec<f32>> =
                matmul_t_with(&q, &xt, Kernel::detect(), DecodeActivations::Q8, None)
                    .unwrap()
                    .to_vec2()
                    .unwrap();
            for r in 0..n_rows {
                for j in 0..n {
                    let (want, mag) = exact(r, j);
                    if (f64::from(q8[r][j]) - want).abs() > gamma(k) * mag {
                        q8_outside += 1;
                    }
                }
            }
        }
        assert!(
            q8_outside > 100,
            "{format:?}: only {q8_outside} 8-bit outputs broke the bound"
        );
    }
}

/// One-hot input rows pick single weights: the product must give back exactly what candle's
/// `dequantize` writes for blocks that candle quantised from arbitrary f32 weights (so the
/// scales and minimums are arbitrary f16 values, and `q * d + m` rounds).
#[test]
fn one_hot_inputs_give_back_candles_dequantised_weights() {
    let dev = Device::Cpu;
    let mut rng = Lcg(8);
    for ggml in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
        let (n, k) = (37, 96);
        let w: Vec<f32> = (0..n * k).map(|_| rng.unit() * 0.3 - 0.05).collect();
        let qt = QTensor::quantize(&Tensor::from_vec(w, (n, k), &dev).unwrap(), ggml).unwrap();
        let want: Vec<Vec<f32>> = qt.dequantize(&dev).unwrap().t().unwrap().to_vec2().unwrap();
        let q = QuantWeight::from_qtensor(&qt).unwrap().unwrap();
        for kernel in kernels() {
            for rows in [1, 3, 8, 16] {
                for first in (0..k).step_by(rows) {
                    let mut x = vec![0f32; rows * k];
                    for r in 0..rows.min(k - first) {
                        x[r * k + first + r] = 1.0;
                    }
                    let xt = Tensor::from_vec(x, (rows, k), &dev).unwrap();
                    let got: Vec<Vec<f32>> = matmul_t_with(&q, &xt, kernel, F32, None)
                        .unwrap()
                        .to_vec2()
                        .unwrap();
                    for r in 0..rows.min(k - first) {
                        assert_eq!(
                            got[r],
                            want[first + r],
                            "{kernel:?} {ggml:?} input {}",
                            first + r
                        );
                    }
                }
            }
        }
    }
}

/// The AVX2 and AVX-512 loops give the portable loop's bits (the order the module documents)
/// for every row count past two groups and odd and even block counts, so a seed samples the
/// same tokens on every CPU.
#[test]
fn every_f32_input_loop_gives_the_portable_bits() {
    let simd: Vec<Kernel> = kernels()
        .into_iter()
        .filter(|&k| k != Kernel::Portable)
        .collect();
    if simd.is_empty() {
        eprintln!("skipped: this CPU runs no SIMD kernel to compare with the portable one");
        return;
    }
    let mut rng = Lcg(77);
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        for nb in [1, 2, 3, 5, 18, 19] {
            let (k, n) = (nb * 32, 35);
            let (bytes, _) = write_blocks(format, n, nb, &mut rng);
            let q = QuantWeight::from_bytes(format, n, k, bytes).unwrap();
            for n_rows in 1..=17 {
                let x: Vec<f32> = (0..n_rows * k).map(|_| rng.unit() * 2.0).collect();
                let xt = Tensor::from_vec(x, (n_rows, k), &Device::Cpu).unwrap();
                let bits = |kernel| -> Vec<u32> {
                    let v: Vec<f32> = matmul_t_with(&q, &xt, kernel, F32, None)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap();
                    v.into_iter().map(f32::to_bits).collect()
                };
                let want = bits(Kernel::Portable);
                for &kernel in &simd {
                    assert_eq!(
                        bits(kernel),
                        want,
                        "{kernel:?} {format:?} {n_rows} rows, {nb} blocks"
                    );
                }
            }
        }
    }
}
