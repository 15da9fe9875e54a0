//! AdamW fused into one pass per tensor.
//!
//! `candle_nn::AdamW` builds about a dozen temporary tensors per parameter per step; this one
//! updates the parameter, both moments and the (optionally rescaled) gradient in a single loop
//! over the parameter's storage, in place, split into fixed chunks on rayon's threads (each
//! value's update depends on that value alone, so the result does not depend on the split).
//! The global gradient norm is one pass too: fixed chunks summed in f64 on rayon's threads and
//! the chunk sums added in order, so it is the same on any number of threads and allocates
//! nothing (with full fine-tuning, `sqr` then `sum_all` built a copy of every gradient, 538 MB
//! for SmolLM2-135M, on one thread).
use std::cell::RefCell;

use rayon::prelude::*;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Storage, Tensor, Var};

use crate::error::{ModelError, Result};

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator epsilon.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-5,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// First and second moments of one variable.
pub type Moments = (Vec<f32>, Vec<f32>);

struct Slot {
    var: Var,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// Fused AdamW over a fixed list of variables.
pub struct AdamW {
    slots: Vec<Slot>,
    cfg: AdamWConfig,
    step: u64,
}

impl std::fmt::Debug for AdamW {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdamW")
            .field("params", &self.slots.len())
            .field("cfg", &self.cfg)
            .field("step", &self.step)
            .finish()
    }
}

/// The per-element update, applied to the parameter's storage in place.
struct Kernel<'a> {
    m: RefCell<&'a mut [f32]>,
    v: RefCell<&'a mut [f32]>,
    h: Hyper,
}

/// The scalars of one step's update.
#[derive(Clone, Copy)]
struct Hyper {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    decay: f32,
    bias1: f32,
    bias2: f32,
    grad_scale: f32,
}

/// Values per rayon task of the optimiser's passes: large enough that a task's overhead is
/// noise (64 Ki values are 1 MiB of the four arrays an update reads), small enough that a
/// 576x576 projection still splits across two threads.
const CHUNK: usize = 1 << 16;

impl Kernel<'_> {
    fn run(&self, p: &mut [f32], g: &[f32]) {
        let mut m = self.m.borrow_mut();
        let mut v = self.v.borrow_mut();
        let h = self.h;
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .for_each(|(((p, g), m), v)| h.run(p, g, m, v));
    }
}

impl Hyper {
    fn run(self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            let g = g * self.grad_scale;
            *m = self.beta1 * *m + (1.0 - self.beta1) * g;
            *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
            let mhat = *m / self.bias1;
            let vhat = *v / self.bias2;
            *p = *p * self.decay - self.lr * mhat / (vhat.sqrt() + self.eps);
        }
    }
}

/// The sum of squares of `g`, in f64: fixed chunks on rayon's threads, their sums added in
/// chunk order, so the value does not depend on the number of threads.
fn sum_of_squares(g: &[f32]) -> f64 {
    let sums: Vec<f64> = g.par_chunks(CHUNK).map(chunk_sum_of_squares).collect();
    sums.iter().sum()
}

/// The sum of squares of one chunk in eight interleaved f64 accumulators (lanes the compiler
/// can vectorise; one running sum would serialise every addition), added in a fixed order.
fn chunk_sum_of_squares(c: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let mut rows = c.chunks_exact(8);
    for row in &mut rows {
        for (acc, &x) in lanes.iter_mut().zip(row) {
            *acc += f64::from(x) * f64::from(x);
        }
    }
    for (acc, &x) in lanes.iter_mut().zip(rows.remainder()) {
        *acc += f64::from(x) * f64::from(x);
    }
    lanes.iter().sum()
}

impl InplaceOp2 for Kernel<'_> {
    fn name(&self) -> &'static str {
        "fused-adamw"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let (Some((a0, a1)), Some((b0, b1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("fused-adamw needs contiguous parameter and gradient");
        };
        match (s1, s2) {
            (CpuStorage::F32(p), CpuStorage::F32(g)) => {
                self.run(&mut p[a0..a1], &g[b0..b1]);
                Ok(())
            }
            _ => candle_core::bail!("fused-adamw supports f32 parameters only"),
        }
    }
}

/// [`sum_of_squares`] of a contiguous f32 CPU tensor; `None` for any other tensor.
fn cpu_f32_sum_of_squares(g: &Tensor) -> Result<Option<f64>> {
    let (storage, layout) = g.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(values)), Some((a, b))) =
        (&*storage, layout.contiguous_offsets())
    else {
        return Ok(None);
    };
    Ok(Some(sum_of_squares(&values[a..b])))
}

impl AdamW {
    /// An optimizer over `vars`, which must be f32 (the fused kernel's type).
    pub fn new(vars: Vec<Var>, cfg: AdamWConfig) -> Result<Self> {
        if let Some(v) = vars.iter().find(|v| v.dtype() != DType::F32) {
            return Err(ModelError::InvalidParameter(format!(
                "fused AdamW needs f32 parameters, found {:?}",
                v.dtype()
            )));
        }
        let slots = vars
            .into_iter()
            .map(|var| {
                let n = var.elem_count();
                Slot {
                    var,
                    m: vec![0.0; n],
                    v: vec![0.0; n],
                }
            })
            .collect();
        Ok(Self {
            slots,
            cfg,
            step: 0,
        })
    }

    /// The step count and both moments of every variable, in optimizer order (for checkpoints).
    pub fn export_state(&self) -> (u64, Vec<Moments>) {
        let moments = self
            .slots
            .iter()
            .map(|s| (s.m.clone(), s.v.clone()))
            .collect();
        (self.step, moments)
    }

    /// Restores what [`AdamW::export_state`] returned for the same variables.
    pub fn import_state(&mut self, step: u64, moments: Vec<Moments>) -> Result<()> {
        if moments.len() != self.slots.len() {
            return Err(ModelError::InvalidParameter(format!(
                "optimizer state has {} variables, the model {}",
                moments.len(),
                self.slots.len()
            )));
        }
        for (slot, (m, v)) in self.slots.iter_mut().zip(moments) {
            if m.len() != slot.m.len() || v.len() != slot.v.len() {
                return Err(ModelError::InvalidParameter(
                    "optimizer state does not match the variables' sizes".into(),
                ));
            }
            slot.m = m;
            slot.v = v;
        }
        self.step = step;
        Ok(())
    }

    /// Optimizer steps taken so far (restored with the state; drives learning-rate schedules).
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.cfg.lr
    }

    /// Changes the learning rate (for schedules).
    pub fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }

    /// The variables being optimised.
    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.slots.iter().map(|s| &s.var)
    }

    /// The gradients of the optimised variables in `grads`, in optimizer order.
    ///
    /// Keeping these instead of the `GradStore` frees the gradients of every activation.
    pub fn collect(&self, grads: &GradStore) -> Vec<Option<Tensor>> {
        self.slots
            .iter()
            .map(|s| grads.get(s.var.as_tensor()).cloned())
            .collect()
    }

    /// Global L2 norm of the gradients of the optimised variables.
    pub fn grad_norm(&self, grads: &GradStore) -> Result<f64> {
        Self::norm(&self.collect(grads))
    }

    /// Global L2 norm of gradients as returned by [`AdamW::collect`].
    ///
    /// On the CPU with f32 gradients it is one allocation-free pass in f64 (see the module's
    /// doc); elsewhere each gradient's squares are summed by candle.
    pub fn norm(grads: &[Option<Tensor>]) -> Result<f64> {
        let mut sq = 0.0f64;
        for g in grads.iter().flatten() {
            sq += match cpu_f32_sum_of_squares(g)? {
                Some(s) => s,
                None => f64::from(
                    g.sqr()?
                        .sum_all()?
                        .to_dtype(DType::F32)?
                        .to_scalar::<f32>()?,
                ),
            };
        }
        Ok(sq.sqrt())
    }

    /// One update with every gradient multiplied by `grad_scale` (for clipping); variables
    /// without a gradient are left alone.
    pub fn step(&mut self, grads: &GradStore, grad_scale: f64) -> Result<()> {
        let grads = self.collect(grads);
        self.step_collected(&grads, grad_scale)
    }

    /// [`AdamW::step`] with gradients as returned by [`AdamW::collect`].
    pub fn step_collected(&mut self, grads: &[Option<Tensor>], grad_scale: f64) -> Result<()> {
        if grads.len() != self.slots.len() {
            return Err(ModelError::InvalidParameter(format!(
                "{} gradients for {} parameters",
                grads.len(),
                self.slots.len()
            )));
        }
        self.step += 1;
        let c = self.cfg;
        let t = self.step as i32;
        for (s, g) in self.slots.iter_mut().zip(grads) {
            let Some(g) = g else {
                continue;
            };
            let g = g.contiguous()?;
            let kernel = Kernel {
                m: RefCell::new(&mut s.m),
                v: RefCell::new(&mut s.v),
                h: Hyper {
                    lr: c.lr as f32,
                    beta1: c.beta1 as f32,
                    beta2: c.beta2 as f32,
                    eps: c.eps as f32,
                    decay: (1.0 - c.lr * c.weight_decay) as f32,
                    bias1: (1.0 - c.beta1.powi(t)) as f32,
                    bias2: (1.0 - c.beta2.powi(t)) as f32,
                    grad_scale: grad_scale as f32,
                },
            };
            if s.var.device().is_cpu() {
                s.var.as_tensor().inplace_op2(&g, &kernel)?;
            } else {
                // Other backends: the same arithmetic on a host copy.
                let mut p: Vec<f32> = s.var.as_tensor().flatten_all()?.to_vec1()?;
                let gv: Vec<f32> = g.flatten_all()?.to_vec1()?;
                kernel.run(&mut p, &gv);
                let t = Tensor::from_vec(p, s.var.shape(), s.var.device())?;
                s.var.set(&t)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step's scalars with a non-trivial scale, decay and bias correction.
    fn hyper() -> Hyper {
        Hyper {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            decay: 1.0 - 0.01 * 0.1,
            bias1: 1.0 - 0.9f32.powi(3),
            bias2: 1.0 - 0.999f32.powi(3),
            grad_scale: 0.5,
        }
    }

    #[test]
    fn the_split_update_equals_one_pass_over_every_value() {
        // Three full chunks and a remainder: every value is updated once, by its own formula,
        // whichever thread takes its chunk.
        let n = 3 * CHUNK + 1234;
        let p0: Vec<f32> = (0..n).map(|i| ((i % 1013) as f32 - 500.0) * 1e-3).collect();
        let g: Vec<f32> = (0..n).map(|i| ((i % 977) as f32 - 480.0) * 1e-2).collect();
        let m0: Vec<f32> = (0..n).map(|i| (i % 31) as f32 * 1e-3).collect();
        let v0: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 1e-4).collect();
        let (mut p1, mut m1, mut v1) = (p0.clone(), m0.clone(), v0.clone());
        hyper().run(&mut p1, &g, &mut m1, &mut v1);
        let (mut p2, mut m2, mut v2) = (p0.clone(), m0, v0);
        rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
            .install(|| {
                let kernel = Kernel {
                    m: RefCell::new(&mut m2),
                    v: RefCell::new(&mut v2),
                    h: hyper(),
                };
                kernel.run(&mut p2, &g);
            });
        assert_eq!(p1, p2);
        assert_eq!(m1, m2);
        assert_eq!(v1, v2);
        // The last value (in the remainder chunk) by hand, in f64: AdamW's formula.
        let i = n - 1;
        let (p, g, m, v) = (
            f64::from(p0[i]),
            f64::from(g[i]) * 0.5,
            (i % 31) as f64 * 1e-3,
            (i % 17) as f64 * 1e-4,
        );
        let m = 0.9 * m + 0.1 * g;
        let v = 0.999 * v + 0.001 * g * g;
        let (mh, vh) = (m / (1.0 - 0.9f64.powi(3)), v / (1.0 - 0.999f64.powi(3)));
        let want = p * (1.0 - 0.001) - 0.01 * mh / (vh.sqrt() + 1e-8);
        assert!(
            (f64::from(p2[i]) - want).abs() < 1e-6,
            "{} vs {want}",
            p2[i]
        );
    }

    #[test]
    fn the_sum_of_squares_is_exact_on_small_integers_and_the_same_on_any_thread_count() {
        // Σ i² for i in 1..=n is n(n+1)(2n+1)/6; with n = 2 chunks and 7 (a remainder both of
        // the chunk and of the eight lanes) every partial sum is an integer below 2^53.
        let n = 2 * CHUNK + 7;
        let g: Vec<f32> = (1..=n).map(|i| i as f32).collect();
        let n = n as f64;
        let want = n * (n + 1.0) * (2.0 * n + 1.0) / 6.0;
        assert_eq!(sum_of_squares(&g), want);
        // Fractions: the value does not depend on how many threads summed the chunks.
        let g: Vec<f32> = (0..3 * CHUNK + 5)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let sums: Vec<f64> = [1, 2, 5]
            .iter()
            .map(|&threads| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| sum_of_squares(&g))
            })
            .collect();
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[0], sums[2]);
        assert_eq!(sum_of_squares(&[]), 0.0);
    }

    #[test]
    fn the_norm_is_the_square_root_of_every_gradients_squares() {
        // 3² + 4² = 25 in one gradient and 12² in a strided (non-contiguous) one, which takes
        // candle's path: sqrt(25 + 144) = 13. A missing gradient counts nothing.
        let a = Tensor::new(&[3f32, 4.0], &candle_core::Device::Cpu).unwrap();
        let b = Tensor::new(&[[12f32, 0.0], [0.0, 0.0]], &candle_core::Device::Cpu)
            .unwrap()
            .t()
            .unwrap();
        assert!(!b.is_contiguous());
        let norm = AdamW::norm(&[Some(a), None, Some(b)]).unwrap();
        assert_eq!(norm, 13.0);
    }
}
