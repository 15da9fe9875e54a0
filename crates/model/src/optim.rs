//! AdamW fused into one pass per tensor.
//!
//! `candle_nn::AdamW` builds about a dozen temporary tensors per parameter per step; this one
//! updates the parameter, both moments and the (optionally rescaled) gradient in a single loop
//! over the parameter's storage, in place.
use std::cell::RefCell;

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Tensor, Var};

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
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    decay: f32,
    bias1: f32,
    bias2: f32,
    grad_scale: f32,
}

impl Kernel<'_> {
    fn run(&self, p: &mut [f32], g: &[f32]) {
        let mut m = self.m.borrow_mut();
        let mut v = self.v.borrow_mut();
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
    pub fn norm(grads: &[Option<Tensor>]) -> Result<f64> {
        let mut sq = 0.0f64;
        for g in grads.iter().flatten() {
            sq += f64::from(
                g.sqr()?
                    .sum_all()?
                    .to_dtype(DType::F32)?
                    .to_scalar::<f32>()?,
            );
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
                lr: c.lr as f32,
                beta1: c.beta1 as f32,
                beta2: c.beta2 as f32,
                eps: c.eps as f32,
                decay: (1.0 - c.lr * c.weight_decay) as f32,
                bias1: (1.0 - c.beta1.powi(t)) as f32,
                bias2: (1.0 - c.beta2.powi(t)) as f32,
                grad_scale: grad_scale as f32,
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
