//! The kernels against an f64 product with the dequantised weights, written from the block
//! layout (not from the kernels), and the SIMD kernels against each other.
use candle_core::{Device, Tensor};

use super::{Kernel, matmul_t_with};
use crate::model::decode_weights::DecodeActivations;
use crate::model::quant::{BlockFormat, QuantWeight};

/// The 8-bit input path, which the tests before the f32-input ones check.
const Q8: DecodeActivations = DecodeActivations::Q8;
/// The f32 input path.
const F32: DecodeActivations = DecodeActivations::F32;

/// A small deterministic generator (64-bit LCG, high bits), so the blocks are written here.
pub(super) struct Lcg(pub(super) u64);

impl Lcg {
    pub(super) fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }

    /// Uniform in `[-1, 1)`.
    pub(super) fn unit(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 30) as f32 - 1.0
    }
}

/// f16 bit patterns with their exact values: 2^-5, 2^-6 * 1.5, 2^-4, -2^-3, 2^-2, -2^-7.
const HALVES: [(u16, f64); 6] = [
    (0x2800, 0.031_25),
    (0x2600, 0.023_437_5),
    (0x2C00, 0.062_5),
    (0xB000, -0.125),
    (0x3400, 0.25),
    (0xA000, -0.007_812_5),
];

/// `rows` weight rows of `nb` blocks each, bytes from `rng` (Q8_0 bytes over all of
/// -128..=127, Q4_1 nibbles over 0..=15); returns the blocks and the f64 values they encode
/// by the GGML layout: `Q8_0` is `d` then 32 signed bytes, `w = d q`; `Q4_1` is `d`, `m`
/// then 16 bytes whose low nibbles are values 0..16 and high nibbles values 16..32,
/// `w = m + d q`.
pub(super) fn write_blocks(
    format: BlockFormat,
    rows: usize,
    nb: usize,
    rng: &mut Lcg,
) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows * nb {
        let (d_bits, d) = HALVES[rng.next() as usize % HALVES.len()];
        bytes.extend(d_bits.to_le_bytes());
        match format {
            BlockFormat::Q8_0 => {
                for _ in 0..32 {
                    let q = rng.next() as u8;
                    bytes.push(q);
                    values.push(d * f64::from(q as i8));
                }
            }
            BlockFormat::Q4_1 => {
                let (m_bits, m) = HALVES[rng.next() as usize % HALVES.len()];
                bytes.extend(m_bits.to_le_bytes());
                let qs: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
                values.extend(qs.iter().map(|&q| m + d * f64::from(q & 0x0F)));
                values.extend(qs.iter().map(|&q| m + d * f64::from(q >> 4)));
                bytes.extend(qs);
            }
        }
    }
    (bytes, values)
}

/// The kernels this CPU runs; each one it lacks is named on stderr (so a skip shows in
/// `cargo test -- --nocapture`, never silently).
pub(super) fn kernels() -> Vec<Kernel> {
    [Kernel::Portable, Kernel::Avx2, Kernel::Avx512Vnni]
        .into_iter()
        .filter(|k| {
            if !k.supported() {
                eprintln!("skipped: this CPU cannot run the {} kernel", k.name());
            }
            k.supported()
        })
        .collect()
}

/// Every kernel's `x W^T` for hand-written blocks lies within the stated bound of the f64
/// product with the encoded weights: per block, half the input's quantisation step
/// (`max|x| / 127 / 2`) times `sum |w|`, plus 1e-5 of `sum |w x|` for f32 summation.
/// Shapes cover one to eleven input rows (both accumulator layouts and a partial group) and
/// odd and even block counts.
#[test]
fn every_kernel_stays_within_the_bound_of_the_dequantised_product() {
    let mut rng = Lcg(12);
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        for (n_rows, nb, n) in [
            (1, 1, 3),
            (1, 18, 40),
            (2, 3, 33),
            (3, 5, 9),
            (4, 2, 7),
            (8, 18, 37),
            (11, 7, 5),
        ] {
            let k = nb * 32;
            let (bytes, w) = write_blocks(format, n, nb, &mut rng);
            let q = QuantWeight::from_bytes(format, n, k, bytes).unwrap();
            let x: Vec<f32> = (0..n_rows * k).map(|_| rng.unit() * 3.0).collect();
            let xt = Tensor::from_vec(x.clone(), (n_rows, k), &Device::Cpu).unwrap();
            for kernel in kernels() {
                let got: Vec<Vec<f32>> = matmul_t_with(&q, &xt, kernel, Q8, None)
                    .unwrap()
                    .to_vec2()
                    .unwrap();
                for r in 0..n_rows {
                    for j in 0..n {
                        let (xr, wj) = (&x[r * k..][..k], &w[j * k..][..k]);
                        let mut want = 0f64;
                        let mut bound = 1e-6;
                        for (xb, wb) in xr.chunks(32).zip(wj.chunks(32)) {
                            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                            let abs_w: f64 = wb.iter().map(|v| v.abs()).sum();
                            bound += f64::from(amax) / 127.0 / 2.0 * abs_w;
                            for (&a, &c) in xb.iter().zip(wb) {
                                want += f64::from(a) * c;
                                bound += 1e-5 * (f64::from(a) * c).abs();
                            }
                        }
                        let d = (f64::from(got[r][j]) - want).abs();
                        assert!(
                            d <= bound,
                            "{kernel:?} {format:?} {n_rows}x{k}x{n} [{r},{j}]: |{} - {want}| > {bound}",
                            got[r][j]
                        );
                    }
                }
            }
        }
    }
}

/// Inputs that 8-bit quantisation keeps exactly (integers with a block maximum of 127: the
/// input scale is 1) make every block an integer dot product times `d` (plus `m` times the
/// input sum for Q4_1). The scales are multiples of 2^-7 and the other inputs lie in -7..=7,
/// so every partial sum is a multiple of 2^-7 below 2^16 and f32 holds it exactly: every
/// kernel's output is the exact product.
#[test]
fn integer_inputs_give_exact_integer_dot_products() {
    let mut rng = Lcg(5);
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        for (n_rows, nb, n) in [(1, 3, 4), (3, 2, 3), (6, 5, 2), (9, 4, 3)] {
            let k = nb * 32;
            let (bytes, w) = write_blocks(format, n, nb, &mut rng);
            let q = QuantWeight::from_bytes(format, n, k, bytes).unwrap();
            let x: Vec<f32> = (0..n_rows * k)
                .map(|i| {
                    if i % 32 == 0 {
                        if rng.next().is_multiple_of(2) {
                            127.0
                        } else {
                            -127.0
                        }
                    } else {
                        (rng.next() % 15) as f32 - 7.0
                    }
                })
                .collect();
            let xt = Tensor::from_vec(x.clone(), (n_rows, k), &Device::Cpu).unwrap();
            for kernel in kernels() {
                let got: Vec<Vec<f32>> = matmul_t_with(&q, &xt, kernel, Q8, None)
                    .unwrap()
                    .to_vec2()
                    .unwrap();
                for r in 0..n_rows {
                    for j in 0..n {
                        let want: f64 =
                            (0..k).map(|i| f64::from(x[r * k + i]) * w[j * k + i]).sum();
                        assert_eq!(
                            f64::from(got[r][j]),
                            want,
                            "{kernel:?} {format:?} [{r},{j}]"
                        );
                    }
                }
            }
        }
    }
}

/// The AVX-512 VNNI kernel gives the AVX2 kernel's results bit for bit, for every row
/// count up to two groups and odd and even block counts (where the CPU has both).
#[test]
fn avx512_vnni_equals_avx2_bit_for_bit() {
    if !Kernel::Avx512Vnni.supported() {
        eprintln!("skipped: this CPU has no AVX-512 VNNI");
        return;
    }
    let mut rng = Lcg(99);
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        for nb in [1, 2, 3, 18, 19] {
            let (k, n) = (nb * 32, 35);
            let (bytes, _) = write_blocks(format, n, nb, &mut rng);
            let q = QuantWeight::from_bytes(format, n, k, bytes).unwrap();
            for n_rows in 1..=16 {
                let x: Vec<f32> = (0..n_rows * k).map(|_| rng.unit() * 2.0).collect();
                let xt = Tensor::from_vec(x, (n_rows, k), &Device::Cpu).unwrap();
                let bits = |kernel| -> Vec<u32> {
                    let v: Vec<f32> = matmul_t_with(&q, &xt, kernel, Q8, None)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap();
                    v.into_iter().map(f32::to_bits).collect()
                };
                assert_eq!(
                    bits(Kernel::Avx512Vnni),
                    bits(Kernel::Avx2),
                    "{format:?} {n_rows} rows, {nb} blocks"
                );
            }
        }
    }
}

#[test]
fn kernel_names_round_trip_and_detection_picks_a_supported_one() {
    for k in [Kernel::Portable, Kernel::Avx2, Kernel::Avx512Vnni] {
        assert_eq!(Kernel::from_name(k.name()), Some(k));
    }
    assert_eq!(Kernel::from_name("sse2"), None);
    assert!(Kernel::detect().supported());
    assert!(Kernel::Portable.supported());
}

/// With an adapter, each output gains `scale * (x A^T) B^T`, computed here in f64 from the
/// factors' values; the product without it is unchanged. Tolerance: 1e-5 of the sum of the
/// update's absolute terms (f32 summation order), plus 1e-6.
#[test]
fn an_adapter_adds_its_low_rank_update_to_every_output() {
    use super::LoraFactors;
    let mut rng = Lcg(31);
    let (n_rows, nb, n, rank) = (5, 3, 70, 4);
    let k = nb * 32;
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_1] {
        let (bytes, _) = write_blocks(format, n, nb, &mut rng);
        let q = QuantWeight::from_bytes(format, n, k, bytes).unwrap();
        let x: Vec<f32> = (0..n_rows * k).map(|_| rng.unit()).collect();
        let a: Vec<f32> = (0..rank * k).map(|_| rng.unit()).collect();
        let b: Vec<f32> = (0..n * rank).map(|_| rng.unit()).collect();
        let dev = Device::Cpu;
        let xt = Tensor::from_vec(x.clone(), (n_rows, k), &dev).unwrap();
        let at = Tensor::from_vec(a.clone(), (rank, k), &dev).unwrap();
        let bt = Tensor::from_vec(b.clone(), (n, rank), &dev).unwrap();
        let scale = 2.0f32;
        for (kernel, act) in kernels().into_iter().flat_map(|k| [(k, Q8), (k, F32)]) {
            let base: Vec<Vec<f32>> = matmul_t_with(&q, &xt, kernel, act, None)
                .unwrap()
                .to_vec2()
                .unwrap();
            let lora = LoraFactors {
                a: &at,
                b: &bt,
                scale,
            };
            let got: Vec<Vec<f32>> = matmul_t_with(&q, &xt, kernel, act, Some(lora))
                .unwrap()
                .to_vec2()
                .unwrap();
            for r in 0..n_rows {
                for j in 0..n {
                    let mut delta = 0f64;
                    let mut mag = 0f64;
                    for t in 0..rank {
                        let xa: f64 = (0..k)
                            .map(|i| f64::from(x[r * k + i]) * f64::from(a[t * k + i]))
                            .sum();
                        let term = f64::from(scale) * xa * f64::from(b[j * rank + t]);
                        delta += term;
                        mag += term.abs()
                            + (0..k)
                                .map(|i| f64::from((x[r * k + i] * a[t * k + i]).abs()))
                                .sum::<f64>();
                    }
                    let want = f64::from(base[r][j]) + delta;
                    let tol = 1e-5 * (mag + f64::from(base[r][j].abs())) + 1e-6;
                    let d = (f64::from(got[r][j]) - want).abs();
                    assert!(
                        d <= tol,
                        "{kernel:?} {act} {format:?} [{r},{j}]: {d} > {tol}"
                    );
                }
            }
        }
    }
}

#[test]
fn fused_products_give_the_bits_of_one_call_each() {
    use super::{LoraFactors, Product, matmul_t_fused};
    let mut rng = Lcg(57);
    let nb = 2;
    let k = nb * 32;
    let dev = Device::Cpu;
    // Three products of one input: Q8_0 with an adapter, Q4_1 without, Q4_1 with one; output
    // widths that are not multiples of the 32-row task block, so tasks end mid-product.
    let shapes = [
        (BlockFormat::Q8_0, 70, true),
        (BlockFormat::Q4_1, 45, false),
        (BlockFormat::Q4_1, 33, true),
    ];
    let rank = 8;
    let mut weights = Vec::new();
    let mut factors = Vec::new();
    for &(format, n, adapted) in &shapes {
        let (bytes, _) = write_blocks(format, n, nb, &mut rng);
        weights.push(QuantWeight::from_bytes(format, n, k, bytes).unwrap());
        let a: Vec<f32> = (0..rank * k).map(|_| rng.unit()).collect();
        let b: Vec<f32> = (0..n * rank).map(|_| rng.unit()).collect();
        factors.push(adapted.then(|| {
            (
                Tensor::from_vec(a, (rank, k), &dev).unwrap(),
                Tensor::from_vec(b, (n, rank), &dev).unwrap(),
            )
        }));
    }
    let bits = |t: &Tensor| -> Vec<u32> {
        let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    };
    for rows in [0, 1, 5] {
        let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
        let xt = Tensor::from_vec(x, (rows, k), &dev).unwrap();
        for (kernel, act) in kernels().into_iter().flat_map(|k| [(k, Q8), (k, F32)]) {
            let products: Vec<Product<'_>> = weights
                .iter()
                .zip(&factors)
                .map(|(w, f)| Product {
                    weight: w,
                    lora: f.as_ref().map(|(a, b)| LoraFactors { a, b, scale: 0.5 }),
                })
                .collect();
            let fused = matmul_t_fused(&xt, &products, kernel, act).unwrap();
            assert_eq!(fused.len(), 3);
            for (p, got) in products.iter().zip(&fused) {
                let alone = matmul_t_with(p.weight, &xt, kernel, act, p.lora).unwrap();
                assert_eq!(got.dims(), &[rows, p.weight.dims().0]);
                assert_eq!(bits(got), bits(&alone), "{kernel:?} {act}, {rows} rows");
            }
        }
    }
}

#[test]
fn the_avx2_quantiser_gives_the_bytes_of_the_scalar_one() {
    if !Kernel::Avx2.supported() {
        return;
    }
    let mut rng = Lcg(91);
    let mut blocks: Vec<Vec<f32>> = (0..2000)
        .map(|i| {
            // Blocks scaled so that many inputs land on halfway points of the grid.
            let amax = 1.0 + (i % 7) as f32;
            (0..32)
                .map(|j| match (i + j) % 5 {
                    0 => amax * ((j as f32 - 16.0) / 127.0 + 0.5 / 127.0),
                    _ => amax * (2.0 * rng.unit() - 1.0),
                })
                .collect()
        })
        .collect();
    blocks.push(vec![0.0; 32]);
    let mut odd = vec![1.0f32; 32];
    odd[3] = f32::NAN;
    odd[9] = -0.0;
    odd[17] = 1e-40;
    blocks.push(odd);
    for block in &blocks {
        let (mut want, mut got) = ([0i8; 32], [0i8; 32]);
        let w = super::quantize_block(block, &mut want);
        // SAFETY: the CPU has AVX2 (checked above).
        #[allow(unsafe_code)]
        let g = unsafe { super::avx2::quantize_block(block, &mut got) };
        assert_eq!(got, want, "{block:?}");
        assert_eq!(
            (g.0.to_bits(), g.1.to_bits()),
            (w.0.to_bits(), w.1.to_bits())
        );
    }
}
