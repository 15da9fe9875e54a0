//! Times the fused AdamW step and the global gradient norm over SmolLM2-135M's 134.5 M
//! parameters (its tensor sizes: the tied embedding and 30 layers' seven projections; the
//! norms' few weights are left out), as full fine-tuning runs them after every update.
//!
//! ```text
//! cargo run -p spade-model --release --example optim_bench [-- --reps 4]
//! ```
//!
//! The first step also pays for the first touch of both moments (1.1 GB); the later ones
//! are the steady state.
use std::time::Instant;

use candle_core::{Device, Tensor, Var};
use spade_model::optim::{AdamW, AdamWConfig};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = match args.iter().position(|a| a == "--reps") {
        Some(i) => args.get(i + 1).map_or(Ok(4), |v| v.parse())?,
        None => 4,
    };
    let (hidden, kv, inter, vocab) = (576usize, 192usize, 1536usize, 49_152usize);
    let layer = [
        hidden * hidden,
        kv * hidden,
        kv * hidden,
        hidden * hidden,
        inter * hidden,
        inter * hidden,
        inter * hidden,
    ];
    let sizes = std::iter::once(vocab * hidden).chain((0..30).flat_map(|_| layer));
    let mut vars = Vec::new();
    let mut grads = Vec::new();
    for n in sizes {
        let values: Vec<f32> = (0..n).map(|j| ((j % 97) as f32 - 48.0) * 0.01).collect();
        let t = Tensor::from_vec(values, n, &Device::Cpu)?;
        vars.push(Var::from_tensor(&t)?);
        grads.push(Some(t));
    }
    let total: usize = vars.iter().map(|v| v.elem_count()).sum();
    println!(
        "{total} parameters, {} rayon threads",
        rayon::current_num_threads()
    );
    let mut opt = AdamW::new(vars, AdamWConfig::default())?;
    for rep in 1..=reps {
        let start = Instant::now();
        let norm = AdamW::norm(&grads)?;
        let norm_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        opt.step_collected(&grads, 0.5)?;
        let step_s = start.elapsed().as_secs_f64();
        println!("step {rep}: norm {norm:.3} in {norm_s:.3} s, AdamW step in {step_s:.3} s");
    }
    Ok(())
}
