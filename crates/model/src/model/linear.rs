//! A linear projection with an optional bias and an optional LoRA adapter.
use std::sync::Arc;

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

use super::decode_weights::DecodeActivations;
use super::kernels::decode_quant_matmul::{LoraFactors, Product};
use super::quant::QuantWeight;

/// Which weights a forward pass differentiates through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Training path (differentiable ops) rather than the fused inference path.
    pub train: bool,
    /// Base weights are tracked (full fine-tuning).
    pub grad_base: bool,
    /// LoRA adapters are tracked.
    pub grad_lora: bool,
    /// The training path's RMSNorm and SiLU·up are the fused ops (see `TrainOps`).
    pub fused: bool,
}

impl Pass {
    /// Inference: nothing is tracked, so no autograd graph builds up across decode steps.
    pub const INFER: Self = Self {
        train: false,
        grad_base: false,
        grad_lora: false,
        fused: false,
    };
}

/// Returns `t` as is when tracked, else a detached view sharing its storage.
pub(crate) fn param(t: &Tensor, tracked: bool) -> Tensor {
    if tracked { t.clone() } else { t.detach() }
}

/// A low-rank update `scale * B A` added to a frozen weight.
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    /// `(rank, in_features)`.
    pub a: Tensor,
    /// `(out_features, rank)`, zero-initialised.
    pub b: Tensor,
    /// `alpha / rank`.
    pub scale: f64,
}

/// `y = x W^T + b (+ scale * x A^T B^T)`.
///
/// The inference path may read `W` from quantised blocks instead ([`Linear::set_quant`]); the
/// training path always reads the f32 weight, so gradients stay exact. LoRA and the bias are
/// applied in f32 on both paths.
#[derive(Debug, Clone)]
pub struct Linear {
    name: String,
    weight: Tensor,
    bias: Option<Tensor>,
    lora: Option<LoraAdapter>,
    /// The blocks a GGUF file stored for this weight, if it has a kernel here.
    native: Option<Arc<QuantWeight>>,
    /// The blocks the inference path reads instead of `weight`, if any.
    quant: Option<Arc<QuantWeight>>,
    /// How the product with `quant` takes its input rows.
    activations: DecodeActivations,
}

impl Linear {
    /// Loads `weight` `(out, in)` and, if `bias`, `bias` `(out)` under `vb`.
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get((out_dim, in_dim), "weight")?;
        let bias = if bias {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Ok(Self {
            name: vb.prefix(),
            weight,
            bias,
            lora: None,
            native: None,
            quant: None,
            activations: DecodeActivations::default(),
        })
    }

    /// Wraps an existing weight (used for a tied LM head).
    pub fn from_weight(name: String, weight: Tensor) -> Self {
        Self {
            name,
            weight,
            bias: None,
            lora: None,
            native: None,
            quant: None,
            activations: DecodeActivations::default(),
        }
    }

    /// The checkpoint path of this projection, e.g. `model.layers.0.self_attn.q_proj`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `(out_features, in_features)`.
    pub fn dims(&self) -> Result<(usize, usize)> {
        self.weight.dims2()
    }

    /// The base weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Records the blocks a GGUF file stored for this weight (they must encode it).
    pub fn set_native(&mut self, blocks: Option<Arc<QuantWeight>>) {
        self.native = blocks;
    }

    /// The blocks a GGUF file stored for this weight.
    pub fn native(&self) -> Option<&Arc<QuantWeight>> {
        self.native.as_ref()
    }

    /// Makes the inference path read `blocks` (`None`: the f32 weight), with its inputs
    /// taken as `activations`. The blocks must encode a frozen weight: an optimiser step on
    /// the base weight does not reach them.
    pub fn set_quant(&mut self, blocks: Option<Arc<QuantWeight>>, activations: DecodeActivations) {
        self.quant = blocks;
        self.activations = activations;
    }

    /// The blocks the inference path reads, if any.
    pub fn quant(&self) -> Option<&Arc<QuantWeight>> {
        self.quant.as_ref()
    }

    /// Installs a LoRA adapter.
    pub fn set_lora(&mut self, lora: LoraAdapter) {
        self.lora = Some(lora);
    }

    /// The quantised product of the inference path for `rows` input rows, with the adapter
    /// when it is frozen and the rows are a decode step's; `None` when the inference path
    /// does not read blocks here (the training path, or a prefill with 8-bit inputs).
    fn product(&self, pass: Pass, rows: usize) -> Option<Product<'_>> {
        let q = self.quant.as_deref()?;
        let decode_rows = rows <= super::kernels::decode_quant_matmul::MAX_ROWS;
        if pass.train || (!decode_rows && self.activations != DecodeActivations::F32) {
            return None;
        }
        let lora = match &self.lora {
            Some(l) if !pass.grad_lora && decode_rows => Some(LoraFactors {
                a: &l.a,
                b: &l.b,
                scale: l.scale as f32,
            }),
            _ => None,
        };
        Some(Product { weight: q, lora })
    }

    /// [`Linear::forward`] of several projections of one input (a layer's q/k/v or
    /// gate/up): when every one reads quantised blocks and has no adapter left to add by
    /// candle ops, the input is quantised once and all products run as one parallel job,
    /// with the same results as one call each.
    pub(crate) fn forward_many<const N: usize>(
        linears: [&Linear; N],
        xs: &Tensor,
        pass: Pass,
    ) -> Result<[Tensor; N]> {
        let dims = xs.dims().to_vec();
        let in_dim = *dims.last().expect("linear input has a last dimension");
        let rows = xs.elem_count() / in_dim;
        let products: Vec<Product<'_>> = linears
            .iter()
            .filter_map(|l| l.product(pass, rows))
            .collect();
        let activations = linears[0].activations;
        let fused = products.len() == N
            && linears
                .iter()
                .zip(&products)
                .all(|(l, p)| l.lora.is_some() == p.lora.is_some() && l.activations == activations);
        if !fused {
            return linears
                .iter()
                .map(|l| l.forward(xs, pass))
                .collect::<Result<Vec<_>>>()
                .map(|v| v.try_into().expect("one output per projection"));
        }
        let x2 = xs.reshape((rows, in_dim))?;
        let kernel = super::kernels::decode_quant_matmul::kernel();
        let outs = super::kernels::decode_quant_matmul::matmul_t_fused(
            &x2,
            &products,
            kernel,
            activations,
        )?;
        let mut done = Vec::with_capacity(N);
        for (l, mut y) in linears.iter().zip(outs) {
            if let Some(b) = &l.bias {
                y = y.broadcast_add(&param(b, pass.grad_base))?;
            }
            let mut out_dims = dims.clone();
            *out_dims.last_mut().expect("nonempty") = y.dim(1)?;
            done.push(y.reshape(out_dims)?);
        }
        Ok(done.try_into().expect("one output per projection"))
    }

    /// The training path's forward without an autograd graph, for a layer with its own
    /// backward ([`super::decoder::TrainMemory::Saved`]): the same ops as [`Linear::forward`]
    /// on the training path (so the same values), on 2-D `x2` `(rows, in)`. Returns
    /// `(x Wᵀ + b + scale (x Aᵀ) Bᵀ, x Aᵀ)`, the second `(rows, rank)` when there is an
    /// adapter: what [`Linear::backward_saved`] needs beside `x2`.
    pub(crate) fn forward_saved(&self, x2: &Tensor) -> Result<(Tensor, Option<Tensor>)> {
        // `frozen_matmul`'s forward is this product (on a copy of `x2`).
        let mut y = x2.matmul(&self.weight.detach().t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(&b.detach())?;
        }
        let mut xa = None;
        if let Some(l) = &self.lora {
            let u = x2.matmul(&l.a.detach().t()?)?;
            let delta = u.matmul(&l.b.detach().t()?)?;
            y = (y + (delta * l.scale)?)?;
            xa = Some(u);
        }
        Ok((y, xa))
    }

    /// The backward of [`Linear::forward_saved`]: `x2` `(rows, in)` its input, `xa` the
    /// `x Aᵀ` it returned, `dy` `(rows, out)` its output's gradient. Pushes `(variable,
    /// gradient)` onto `grads` for the base weight and bias when `base`, for the adapter's
    /// factors when `lora`; and when `want_dx`, the products whose sum is the input's
    /// gradient onto `dx` (`dy W`, and `scale (dy B) A` with an adapter), for
    /// [`matmul_sum`] to add up with other projections' in one buffer.
    pub(crate) fn backward_saved(
        &self,
        x2: &Tensor,
        xa: Option<&Tensor>,
        dy: &Tensor,
        (base, lora, want_dx): (bool, bool, bool),
        grads: &mut Vec<(Tensor, Tensor)>,
        dx: &mut Vec<(Tensor, Tensor)>,
    ) -> Result<()> {
        if base {
            grads.push((self.weight.clone(), dy.t()?.matmul(x2)?));
            if let Some(b) = &self.bias {
                grads.push((b.clone(), dy.sum(0)?));
            }
        }
        if want_dx {
            dx.push((dy.clone(), self.weight.detach()));
        }
        if let Some(l) = &self.lora
            && (lora || want_dx)
        {
            // y += scale u Bᵀ with u = x Aᵀ: du = scale dy B.
            let du = (dy.matmul(&l.b.detach())? * l.scale)?;
            if lora {
                let Some(u) = xa else {
                    candle_core::bail!("{}: the adapter's x Aᵀ was not saved", self.name);
                };
                grads.push((l.b.clone(), (dy.t()?.matmul(u)? * l.scale)?));
                grads.push((l.a.clone(), du.t()?.matmul(x2)?));
            }
            if want_dx {
                dx.push((du, l.a.detach()));
            }
        }
        Ok(())
    }

    pub(crate) fn forward(&self, xs: &Tensor, pass: Pass) -> Result<Tensor> {
        let dims = xs.dims().to_vec();
        let in_dim = *dims.last().expect("linear input has a last dimension");
        let rows = xs.elem_count() / in_dim;
        let x2 = xs.reshape((rows, in_dim))?;
        // The quantised decode product adds the adapter itself (no candle ops per step).
        let mut lora_added = false;
        let mut y = if pass.train && !pass.grad_base {
            super::kernels::train_matmul::frozen_matmul(&x2, &self.weight)?
        } else if let Some(p) = self.product(pass, rows) {
            lora_added = p.lora.is_some();
            let kernel = super::kernels::decode_quant_matmul::kernel();
            let mut out = super::kernels::decode_quant_matmul::matmul_t_fused(
                &x2,
                &[p],
                kernel,
                self.activations,
            )?;
            out.pop().expect("one product gives one output")
        } else if !pass.train && super::kernels::decode_matmul::applies(&x2, &self.weight, rows) {
            super::kernels::decode_matmul::matmul_t(&x2, &self.weight.detach())?
        } else {
            x2.matmul(&param(&self.weight, pass.grad_base).t()?)?
        };
        if let Some(b) = &self.bias {
            y = y.broadcast_add(&param(b, pass.grad_base))?;
        }
        if let (Some(l), false) = (&self.lora, lora_added) {
            let a = param(&l.a, pass.grad_lora);
            let b = param(&l.b, pass.grad_lora);
            let delta = x2.matmul(&a.t()?)?.matmul(&b.t()?)?;
            y = (y + (delta * l.scale)?)?;
        }
        let mut out_dims = dims;
        *out_dims.last_mut().expect("nonempty") = y.dim(1)?;
        y.reshape(out_dims)
    }
}

/// `Σ lhs · rhs` over `terms`, each `lhs` `(rows, k)` and `rhs` `(k, n)` (2-D f32 CPU tensors,
/// any strides, `k` per term), accumulated in one `(rows, n)` buffer by `gemm` on rayon's
/// threads: no intermediate product and no separate addition per term.
pub(crate) fn matmul_sum(terms: &[(Tensor, Tensor)]) -> Result<Tensor> {
    use candle_core::Storage;
    let Some((first, _)) = terms.first() else {
        candle_core::bail!("matmul_sum of no products");
    };
    let rows = first.dim(0)?;
    let n = terms[0].1.dim(1)?;
    let mut dst = vec![0f32; rows * n];
    for (i, (lhs, rhs)) in terms.iter().enumerate() {
        let (m, k) = lhs.dims2()?;
        if m != rows || rhs.dims2()? != (k, n) {
            candle_core::bail!(
                "matmul_sum: {:?} · {:?} into ({rows}, {n})",
                lhs.dims(),
                rhs.dims()
            );
        }
        let (ls, ll) = lhs.storage_and_layout();
        let (rs, rl) = rhs.storage_and_layout();
        let (Storage::Cpu(lc), Storage::Cpu(rc)) = (&*ls, &*rs) else {
            candle_core::bail!("matmul_sum runs on the CPU only");
        };
        let (l, r) = (lc.as_slice::<f32>()?, rc.as_slice::<f32>()?);
        let (l_rs, l_cs) = (ll.stride()[0], ll.stride()[1]);
        let (r_rs, r_cs) = (rl.stride()[0], rl.stride()[1]);
        let last = |off: usize, a: usize, sa: usize, b: usize, sb: usize| {
            off + a.saturating_sub(1) * sa + b.saturating_sub(1) * sb
        };
        if rows == 0 || n == 0 || k == 0 {
            continue;
        }
        if last(ll.start_offset(), m, l_rs, k, l_cs) >= l.len()
            || last(rl.start_offset(), k, r_rs, n, r_cs) >= r.len()
        {
            candle_core::bail!("matmul_sum: an operand is shorter than its layout");
        }
        // SAFETY: the check above keeps every element read inside its slice, `dst` holds
        // `rows * n` values written with row stride `n`, and it aliases neither operand.
        #[allow(unsafe_code)]
        unsafe {
            gemm::gemm(
                rows,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                i > 0,
                l.as_ptr().add(ll.start_offset()),
                l_cs as isize,
                l_rs as isize,
                r.as_ptr().add(rl.start_offset()),
                r_cs as isize,
                r_rs as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(rayon::current_num_threads()),
            );
        }
    }
    Tensor::from_vec(dst, (rows, n), first.device())
}
