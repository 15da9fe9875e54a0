//! Base weights kept in GGML blocks for the inference path.
//!
//! A [`QuantWeight`] holds a `(out, in)` weight as GGML `Q8_0` or `Q4_1` blocks of 32 values
//! along each row, byte for byte as a GGUF file stores them: `Q8_0` is an f16 scale `d` and 32
//! signed bytes (`w = d q`, 34 bytes a block), `Q4_1` an f16 scale `d`, an f16 minimum `m` and
//! 32 four-bit values (`w = m + d q`, 20 bytes a block; byte `j` holds value `j` in its low
//! nibble and value `j + 16` in its high one). Decoding reads these bytes instead of the f32
//! weights: a quarter (`Q8_0`) or an eighth (`Q4_1`) of the traffic per token. The training path
//! never reads them; see [`super::quant_matmul`] for the product.
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Result, Tensor};

/// The block formats the quantised decode path has a kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// 32 signed bytes and an f16 scale.
    Q8_0,
    /// 32 four-bit values, an f16 scale and an f16 minimum.
    Q4_1,
}

impl BlockFormat {
    /// Values per block.
    pub const VALUES: usize = 32;

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_1 => 20,
        }
    }

    /// The format's name, as GGML spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Q8_0 => "q8_0",
            Self::Q4_1 => "q4_1",
        }
    }

    fn ggml(self) -> GgmlDType {
        match self {
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::Q4_1 => GgmlDType::Q4_1,
        }
    }

    fn from_ggml(dtype: GgmlDType) -> Option<Self> {
        match dtype {
            GgmlDType::Q8_0 => Some(Self::Q8_0),
            GgmlDType::Q4_1 => Some(Self::Q4_1),
            _ => None,
        }
    }
}

/// A frozen `(rows, cols)` weight in GGML blocks, rows contiguous.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantWeight {
    format: BlockFormat,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl QuantWeight {
    /// Quantises an f32 `(rows, cols)` weight (GGML's rounding; `cols` a multiple of 32).
    pub fn quantize(weight: &Tensor, format: BlockFormat) -> Result<Self> {
        let (_, cols) = weight.dims2()?;
        if !cols.is_multiple_of(BlockFormat::VALUES) {
            candle_core::bail!(
                "cannot quantise a weight of {cols} columns into blocks of {}",
                BlockFormat::VALUES
            );
        }
        let q = QTensor::quantize(&weight.contiguous()?, format.ggml())?;
        Self::from_blocks(&q, format)
    }

    /// A `(rows, cols)` weight from its raw blocks (`cols / 32` blocks of `format` per row,
    /// rows one after another), as a GGUF file stores them.
    pub fn from_bytes(
        format: BlockFormat,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<Self> {
        if !cols.is_multiple_of(BlockFormat::VALUES) {
            candle_core::bail!("a row of {cols} values is not whole blocks of 32");
        }
        let want = rows * cols / BlockFormat::VALUES * format.block_bytes();
        if data.len() != want {
            candle_core::bail!(
                "a {rows}x{cols} {} weight needs {want} bytes, got {}",
                format.name(),
                data.len()
            );
        }
        Ok(Self {
            format,
            rows,
            cols,
            data,
        })
    }

    /// The blocks of a 2-D GGUF tensor (GGUF dims `[cols, rows]`, i.e. shape `(rows, cols)`),
    /// or `None` when its type has no kernel here.
    pub fn from_qtensor(q: &QTensor) -> Result<Option<Self>> {
        match BlockFormat::from_ggml(q.dtype()) {
            Some(format) => Self::from_blocks(q, format).map(Some),
            None => Ok(None),
        }
    }

    fn from_blocks(q: &QTensor, format: BlockFormat) -> Result<Self> {
        let (rows, cols) = q.shape().dims2()?;
        let data = q.data()?.into_owned();
        let want = rows * cols / BlockFormat::VALUES * format.block_bytes();
        if data.len() != want {
            candle_core::bail!(
                "a {rows}x{cols} {} tensor holds {} bytes, expected {want}",
                format.name(),
                data.len()
            );
        }
        Ok(Self {
            format,
            rows,
            cols,
            data,
        })
    }

    /// The block format.
    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// `(rows, cols)`: `(out_features, in_features)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Bytes of blocks (what one full product reads).
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.cols / BlockFormat::VALUES
    }

    /// The bytes of row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        let n = self.blocks_per_row() * self.format.block_bytes();
        &self.data[r * n..(r + 1) * n]
    }

    /// The raw blocks of every row.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// Undoes llama.cpp's q/k row permutation (see [`crate::load::gguf::unpermute`]) on whole
    /// rows: blocks run along rows, so permuting rows of blocks equals quantising the permuted
    /// f32 rows.
    pub fn unpermute_rows(&self, heads: usize) -> Result<Self> {
        if heads == 0 || !self.rows.is_multiple_of(2 * heads) {
            candle_core::bail!("cannot unpermute {} rows over {heads} heads", self.rows);
        }
        let half = self.rows / heads / 2;
        let n = self.blocks_per_row() * self.format.block_bytes();
        let mut data = vec![0u8; self.data.len()];
        for h in 0..heads {
            for a in 0..2 {
                for b in 0..half {
                    let dst = h * 2 * half + a * half + b;
                    let src = h * 2 * half + b * 2 + a;
                    data[dst * n..(dst + 1) * n].copy_from_slice(self.row(src));
                }
            }
        }
        Ok(Self {
            data,
            ..self.clone()
        })
    }

    /// The weight in f32 `(rows, cols)`, exactly the values the blocks encode.
    pub fn dequantize(&self, device: &Device) -> Result<Tensor> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        let bb = self.format.block_bytes();
        for blk in self.data.chunks_exact(bb) {
            let d = f16_bits_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
            match self.format {
                BlockFormat::Q8_0 => out.extend(blk[2..].iter().map(|&q| d * f32::from(q as i8))),
                BlockFormat::Q4_1 => {
                    let m = f16_bits_to_f32(u16::from_le_bytes([blk[2], blk[3]]));
                    let qs = &blk[4..];
                    out.extend(qs.iter().map(|&q| m + d * f32::from(q & 0x0F)));
                    out.extend(qs.iter().map(|&q| m + d * f32::from(q >> 4)));
                }
            }
        }
        Tensor::from_vec(out, (self.rows, self.cols), device)
    }

    /// `x W^T` for `x` `(n, cols)` f32 on the CPU, activations quantised to 8 bits per block
    /// (see [`super::quant_matmul`]); no gradient.
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        super::quant_matmul::matmul_t(self, x)
    }
}

/// An IEEE half-precision bit pattern as f32 (exact).
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x3FF);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m * 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1F, 0) => sign | 0x7F80_0000,
        (0x1F, m) => sign | 0x7FC0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversion_matches_known_values() {
        for (bits, want) in [
            (0x3C00u16, 1.0f32),
            (0xC000, -2.0),
            (0x3555, 0.333_251_95),
            (0x0001, 5.960_464_5e-8),
            (0x7BFF, 65504.0),
            (0x0000, 0.0),
        ] {
            assert_eq!(f16_bits_to_f32(bits), want, "{bits:#x}");
        }
        assert!(f16_bits_to_f32(0x7C00).is_infinite());
    }
}
