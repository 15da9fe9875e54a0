//! Seeded initialisation of the variables in a `VarMap`.
use candle_core::{Result, Tensor};
use candle_nn::VarMap;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Sets every variable whose name passes `filter` from a seeded normal distribution `N(0, std)`;
/// norm weights are set to one and LoRA `B` matrices to zero.
///
/// Variables are visited in name order, so the result depends only on `seed`.
pub fn randomize(
    varmap: &VarMap,
    seed: u64,
    std: f64,
    filter: impl Fn(&str) -> bool,
) -> Result<()> {
    let data = varmap.data().lock().expect("varmap lock poisoned");
    let mut names: Vec<&String> = data.keys().filter(|n| filter(n)).collect();
    names.sort();
    let mut rng = StdRng::seed_from_u64(seed);
    for name in names {
        let var = &data[name];
        let n = var.elem_count();
        let values: Vec<f32> = if name.contains("norm") {
            vec![1.0; n]
        } else if name.contains("lora_B") {
            vec![0.0; n]
        } else {
            (0..n).map(|_| (normal(&mut rng) * std) as f32).collect()
        };
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?.to_dtype(var.dtype())?)?;
    }
    Ok(())
}

/// A standard normal sample (Box–Muller).
pub fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}
