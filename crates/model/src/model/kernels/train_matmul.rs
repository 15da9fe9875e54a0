//! `x W^T` for a frozen weight `W`, with a backward pass that skips the weight's gradient.
//!
//! candle's `matmul` backward always computes the gradient of both operands, even when one of
//! them is a detached constant: with LoRA that is a weight-sized matmul, a weight-sized zero
//! tensor and an add per projection per micro-batch, thrown away. This op computes only the
//! input's gradient.
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Storage, Tensor};

struct FrozenMatmul {
    /// `(out, in)`, detached.
    weight: Tensor,
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("frozen-matmul needs a contiguous input");
        };
        let x = Tensor::from_slice(
            &storage.as_slice::<f32>()?[start..end],
            layout.shape(),
            self.weight.device(),
        )?;
        let y = x.matmul(&self.weight.t()?)?;
        let shape = y.shape().clone();
        let (s, l) = y.storage_and_layout();
        let Storage::Cpu(cpu) = &*s else {
            candle_core::bail!("frozen-matmul runs on the CPU only");
        };
        let (a, b) = l
            .contiguous_offsets()
            .expect("a fresh matmul result is contiguous");
        Ok((
            CpuStorage::F32(cpu.as_slice::<f32>()?[a..b].to_vec()),
            shape,
        ))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad.matmul(&self.weight)?))
    }
}

/// `x W^T` for 2-D f32 `x` `(rows, in)` and a frozen `weight` `(out, in)`: differentiable in
/// `x` only. Falls back to a plain matmul off the CPU or for other dtypes.
pub fn frozen_matmul(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let weight = weight.detach();
    if !x.device().is_cpu() || x.dtype() != candle_core::DType::F32 {
        return x.matmul(&weight.t()?);
    }
    x.contiguous()?.apply_op1(FrozenMatmul { weight })
}
