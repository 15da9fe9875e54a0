//! Precomputed RoPE cosine and sine tables.
use candle_core::{DType, Device, Result, Tensor};

/// Cosine and sine tables of shape `(max_positions, head_dim / 2)`.
#[derive(Debug, Clone)]
pub struct RotaryTables {
    cos: Tensor,
    sin: Tensor,
}

impl RotaryTables {
    /// Builds the tables for `head_dim` and base frequency `theta`, in `dtype`.
    pub fn new(
        head_dim: usize,
        theta: f64,
        max_positions: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let half = head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, half), device)?;
        let positions = Tensor::arange(0u32, max_positions as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((max_positions, 1))?;
        let freqs = positions.broadcast_mul(&inv_freq)?;
        Ok(Self {
            cos: freqs.cos()?.to_dtype(dtype)?,
            sin: freqs.sin()?.to_dtype(dtype)?,
        })
    }

    /// Tables for positions `offset .. offset + len`.
    pub fn slice(&self, offset: usize, len: usize) -> Result<(Tensor, Tensor)> {
        let max = self.cos.dim(0)?;
        if offset + len > max {
            candle_core::bail!(
                "position {} exceeds max_position_embeddings {max}",
                offset + len
            );
        }
        Ok((
            self.cos.narrow(0, offset, len)?,
            self.sin.narrow(0, offset, len)?,
        ))
    }

    /// Tables for `t` positions of each row, row `r` starting at `positions[r]`: `(t, d/2)`
    /// when every row is at the same position (or there is one row), else `(rows, t, d/2)`.
    pub fn at(&self, positions: &[usize], t: usize) -> Result<(Tensor, Tensor)> {
        let first = positions.first().copied().unwrap_or(0);
        if positions.iter().all(|&p| p == first) {
            return self.slice(first, t);
        }
        let max = self.cos.dim(0)?;
        let end = positions.iter().max().copied().unwrap_or(0) + t;
        if end > max {
            candle_core::bail!("position {end} exceeds max_position_embeddings {max}");
        }
        let idx: Vec<u32> = positions
            .iter()
            .flat_map(|&p| (p..p + t).map(|x| x as u32))
            .collect();
        let idx = Tensor::new(idx.as_slice(), self.cos.device())?;
        let half = self.cos.dim(1)?;
        let shape = (positions.len(), t, half);
        Ok((
            self.cos.index_select(&idx, 0)?.reshape(shape)?,
            self.sin.index_select(&idx, 0)?.reshape(shape)?,
        ))
    }
}
