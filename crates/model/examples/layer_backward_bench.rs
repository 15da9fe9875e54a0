//! Times an update's forward, loss and backward on a random decoder of SmolLM2-135M's shape
//! with each [`TrainMemory`]: every layer's graph kept, checkpointed layers, and each
//! layer's own backward on what its forward saved.
//!
//! ```text
//! RAYON_NUM_THREADS=2 cargo run -p spade-model --release --example layer_backward_bench -- \
//!     [--full] [--reps 3] [--shapes 4x128,4x512] [--modes kept,checkpointed,saved]
//! ```
//!
//! LoRA r=8, alpha 16 on q, k, v, o, gate, up and down (or, with `--full`, every weight).
//! Each row is a quarter prompt and three quarters scored completion; the loss is the
//! advantage-weighted sum of the completion's log-probabilities (advantages spread as a
//! GRPO group's), as `spade bench-model`'s update. Every measurement runs in a fresh process
//! (this program again, with `--child`): it builds the model, runs one update to warm up and
//! one timed update, and reports the seconds of the timed one and its peak resident memory
//! (`VmHWM`) less the resident memory before the first (`VmRSS`). The parent alternates the
//! modes within each repetition and prints per mode and shape the median seconds, tokens/s
//! and memory growth. Compare modes only within one run: the machine may be shared.
use std::process::Command;
use std::time::Instant;

use candle_core::{Device, Tensor, Var};
use spade_model::logprob::{Spans, span_logprobs_and_entropy_for_update};
use spade_model::model::{Decoder, LoraConfig, ModelConfig, TrainMemory, lora};

/// A field of `/proc/self/status` in MiB (`VmRSS`, `VmHWM`).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn mode(name: &str) -> TrainMemory {
    match name {
        "kept" => TrainMemory::Kept,
        "checkpointed" => TrainMemory::Checkpointed,
        "saved" => TrainMemory::Saved,
        other => panic!("unknown mode {other}"),
    }
}

fn shape(s: &str) -> (usize, usize) {
    let (b, t) = s.split_once('x').expect("a shape is BxT");
    (b.parse().expect("rows"), t.parse().expect("tokens a row"))
}

/// One update: forward, the loss's backward and the layers', each trainable variable's
/// gradient summed as an update sums them. Returns the loss.
fn update(model: &Decoder, vars: &[Var], rows: &[Spans], adv: &Tensor) -> anyhow::Result<f32> {
    let start = Instant::now();
    let (lp, _entropy, ck) = span_logprobs_and_entropy_for_update(model, rows)?;
    let forward = start.elapsed().as_secs_f64();
    let loss = (lp.mul(adv)?.sum_all()?.neg()? / adv.elem_count() as f64)?;
    let mut sums: Vec<Option<Tensor>> = vec![None; vars.len()];
    let mut add = |g: &candle_core::backprop::GradStore| -> spade_model::Result<()> {
        for (sum, var) in sums.iter_mut().zip(vars) {
            if let Some(g) = g.get(var.as_tensor()) {
                *sum = Some(match sum.take() {
                    Some(s) => (s + g)?,
                    None => g.clone(),
                });
            }
        }
        Ok(())
    };
    let head = loss.backward()?;
    add(&head)?;
    let head_backward = start.elapsed().as_secs_f64() - forward;
    let layers = ck.and_then(|ck| Some((head.get(ck.output())?.clone(), ck)));
    drop(head);
    if let Some((grad, ck)) = layers {
        model.backward_layers(ck, grad, &mut add)?;
    }
    let layers_backward = start.elapsed().as_secs_f64() - forward - head_backward;
    eprintln!(
        "phases: forward and loss {forward:.3} s, the loss's backward {head_backward:.3} s, \
         the layers' backward {layers_backward:.3} s"
    );
    let missing = sums.iter().filter(|s| s.is_none()).count();
    anyhow::ensure!(missing == 0, "{missing} variables got no gradient");
    Ok(loss.to_scalar::<f32>()?)
}

/// The child: one mode at one shape; prints `RESULT seconds growth_mib loss`.
fn child(memory: TrainMemory, (b, t): (usize, usize), full: bool) -> anyhow::Result<()> {
    let cfg = ModelConfig::smollm2_135m();
    let (mut model, varmap) = Decoder::random(&cfg, 1, 0.02, &Device::Cpu)?;
    let vars = if full {
        varmap.all_vars()
    } else {
        let adapters = lora::attach_new(&mut model, &LoraConfig::default(), 2)?;
        // Non-zero B, as after a few steps (and so A gets a non-zero gradient); the same in
        // every process, so every mode's loss is the same.
        for var in adapters.all_vars() {
            if var.dims()[1] == LoraConfig::default().r {
                let fill: Vec<f32> = (0..var.elem_count())
                    .map(|i| ((i * 37) as f32).sin() * 0.01)
                    .collect();
                var.set(&Tensor::from_vec(fill, var.shape(), &Device::Cpu)?)?;
            }
        }
        adapters.all_vars()
    };
    model.set_train_memory(memory);
    let prompt_len = t / 4;
    let tokens: Vec<Vec<u32>> = (0..b)
        .map(|i| {
            (0..t)
                .map(|k| 200 + ((k * 7919 + i * 104_729) % 40_000) as u32)
                .collect()
        })
        .collect();
    let span = std::slice::from_ref(&(0..t - prompt_len)).to_vec();
    let rows: Vec<Spans> = tokens
        .iter()
        .map(|r| Spans {
            prompt: &r[..prompt_len],
            completion: &r[prompt_len..],
            spans: &span,
        })
        .collect();
    let adv: Vec<f32> = (0..b)
        .flat_map(|i| std::iter::repeat_n(i as f32 - (b as f32 - 1.0) / 2.0, t - prompt_len))
        .collect();
    let adv = Tensor::from_vec(adv, b * (t - prompt_len), &Device::Cpu)?;
    let before = status_mib("VmRSS:");
    update(&model, &vars, &rows, &adv)?;
    let start = Instant::now();
    let loss = update(&model, &vars, &rows, &adv)?;
    let secs = start.elapsed().as_secs_f64();
    let growth = status_mib("VmHWM:") - before;
    println!("RESULT {secs:.4} {growth:.1} {loss}");
    Ok(())
}

/// One child's seconds, memory growth in MiB and loss.
type Run = (f64, f64, String);

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, default: &str| -> String {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
            .unwrap_or_else(|| default.to_string())
    };
    let full = args.iter().any(|a| a == "--full");
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(mode(&args[i + 1]), shape(&args[i + 2]), full);
    }
    let reps: usize = value("--reps", "3").parse()?;
    let shapes: Vec<String> = value("--shapes", "4x128,4x512")
        .split(',')
        .map(String::from)
        .collect();
    let modes: Vec<String> = value("--modes", "kept,checkpointed,saved")
        .split(',')
        .map(String::from)
        .collect();
    let exe = std::env::current_exe()?;
    let mut results: Vec<(String, String, Vec<Run>)> = Vec::new();
    for s in &shapes {
        for m in &modes {
            results.push((s.clone(), m.clone(), Vec::new()));
        }
    }
    for rep in 0..reps {
        for (s, m, got) in &mut results {
            let mut cmd = Command::new(&exe);
            cmd.args(["--child", m.as_str(), s.as_str()]);
            if full {
                cmd.arg("--full");
            }
            let out = cmd.output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{m} at {s} failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                })?;
            let f: Vec<&str> = line.split_whitespace().collect();
            let (secs, growth) = (f[0].parse::<f64>()?, f[1].parse::<f64>()?);
            eprintln!(
                "rep {rep} {s} {m}: {secs:.3} s, +{growth:.0} MiB, loss {}",
                f[2]
            );
            got.push((secs, growth, f[2].to_string()));
        }
    }
    println!(
        "{} update (forward, loss, backward), median of {reps}, {} rayon threads",
        if full { "full fine-tuning" } else { "LoRA r=8" },
        rayon_threads()
    );
    println!("| shape | mode | seconds | tokens/s | peak RSS growth MiB | MB/token |");
    println!("|---|---|---|---|---|---|");
    for (s, m, got) in &results {
        let (b, t) = shape(s);
        let mut secs: Vec<f64> = got.iter().map(|g| g.0).collect();
        let mut growth: Vec<f64> = got.iter().map(|g| g.1).collect();
        let (secs, growth) = (median(&mut secs), median(&mut growth));
        let tokens = (b * t) as f64;
        println!(
            "| {s} | {m} | {secs:.3} | {:.0} | {growth:.0} | {:.2} |",
            tokens / secs,
            growth * 1024.0 * 1024.0 / tokens / 1e6
        );
    }
    Ok(())
}

fn rayon_threads() -> String {
    std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into())
}
