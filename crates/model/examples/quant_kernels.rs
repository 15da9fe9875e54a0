//! The quantised kernels alone, at the decode step of one and of eight sequences: the 30
//! layers' seven `Q4_1` projections of SmolLM2-135M's shape (random weights), streamed from
//! memory (30 distinct layers) and from cache (one layer 30 times), for each kernel the CPU
//! has with f32 and with 8-bit inputs, against a plain read of the same number of bytes.
//!
//! `cargo run --release --example quant_kernels` (set `RAYON_NUM_THREADS=1` for one thread).
use std::time::Instant;

use candle_core::{Device, Tensor};
use rayon::prelude::*;
use spade_model::model::DecodeActivations;
use spade_model::model::kernels::decode_quant_matmul::{self as quant_matmul, Kernel};
use spade_model::model::quant::{BlockFormat, QuantWeight};

/// SmolLM2-135M's projections `(out, in)`: q, k, v, o, gate, up, down.
const SHAPES: [(usize, usize); 7] = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (1536, 576),
    (576, 1536),
];
const LAYERS: usize = 30;

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let mut weights = Vec::new();
    for _ in 0..LAYERS {
        for &(n, k) in &SHAPES {
            let w = Tensor::randn(0f32, 0.05, (n, k), &dev)?;
            weights.push(QuantWeight::quantize(&w, BlockFormat::Q4_1)?);
        }
    }
    // The tied LM head, Q8_0 in the default GGUF: once a token.
    let head = QuantWeight::quantize(
        &Tensor::randn(0f32, 0.05, (49152, 576), &dev)?,
        BlockFormat::Q8_0,
    )?;
    let bytes: usize = weights.iter().map(QuantWeight::bytes).sum::<usize>() + head.bytes();
    println!(
        "threads: {}; {LAYERS} layers, {} MB of Q4_1 blocks and the Q8_0 head per token",
        spade_model::model::kernels::decode_pool::threads(),
        bytes / 1_000_000
    );
    let runs = [Kernel::Avx512Vnni, Kernel::Avx2, Kernel::Portable]
        .into_iter()
        .flat_map(|k| [DecodeActivations::F32, DecodeActivations::Q8].map(move |a| (k, a)))
        .flat_map(|ka| [1, 8].map(move |g| (ka, g)));
    for ((kernel, act), g) in runs {
        if !kernel.supported() {
            println!("{}: this CPU lacks it", kernel.loop_name(act));
            continue;
        }
        let x576 = Tensor::randn(0f32, 1.0, (g, 576), &dev)?;
        let x1536 = Tensor::randn(0f32, 1.0, (g, 1536), &dev)?;
        for (name, distinct) in [("30 distinct layers", LAYERS), ("one layer 30 times", 1)] {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                for _token in 0..10 {
                    for l in 0..LAYERS {
                        for w in &weights[(l % distinct) * 7..][..7] {
                            let x = if w.dims().1 == 576 { &x576 } else { &x1536 };
                            quant_matmul::matmul_t_with(w, x, kernel, act, None)?;
                        }
                    }
                    quant_matmul::matmul_t_with(&head, &x576, kernel, act, None)?;
                }
                best = best.min(t.elapsed().as_secs_f64() / 10.0);
            }
            println!(
                "{:>24} G={g} {name}: {:.2} ms per step ({:.2} GB/s)",
                kernel.loop_name(act),
                best * 1e3,
                bytes as f64 / best / 1e9
            );
        }
    }
    let buf = vec![1u64; bytes / 8];
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let s: u64 = buf
            .par_chunks(4096)
            .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
            .sum();
        std::hint::black_box(s);
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "plain read of the same bytes (rayon): {:.2} ms ({:.2} GB/s)",
        best * 1e3,
        bytes as f64 / best / 1e9
    );
    Ok(())
}
