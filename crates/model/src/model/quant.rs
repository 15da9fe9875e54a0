//! Base weights kept in GGML blocks for the inference path.
//!
//! A [`QuantWeight`] holds a `(out, in)` weight as GGML `Q8_0` or `Q4_1` blocks of 32 values
//! along each row, byte for byte as a GGUF file stores them: `Q8_0` is an f16 scale `d` and 32
//! signed bytes (`w = d q`, 34 bytes a block), `Q4_1` an f16 scale `d`, an f16 minimum `m` and
//! 32 four-bit values (`w = m + d q`, 20 bytes a block; byte `j` holds value `j` in its low
//! nibble and value `j + 16` in its high one). Decoding reads these bytes instead of the f32
//! weights: a quarter (`Q8_0`) or an eighth (`Q4_1`) of the traffic per token. The training path
//! never reads them; see [`super::kernels::decode_quant_matmul`] for the product.
//!
//! In memory the blocks are split into planes, the same bytes in another order: every
//! block's `d`, then (for `Q4_1`) every block's `m`, then every block's values. The product
//! then reads eight blocks' scales with one load and converts them together, where the
//! interleaved layout needed a scalar load and conversion per block (which made the `Q4_1`
//! product of one input row bound by instructions, not by memory).
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

    /// Bytes of a block's values (the block less its scale and minimum).
    pub fn value_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 32,
            Self::Q4_1 => 16,
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

/// A frozen `(rows, cols)` weight in GGML blocks, rows contiguous, stored as planes (see the
/// module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantWeight {
    format: BlockFormat,
    rows: usize,
    cols: usize,
    /// Per block, in row order: the scale's f16 bits.
    d: Vec<u16>,
    /// Per block: the minimum's f16 bits (`Q4_1`; empty for `Q8_0`).
    m: Vec<u16>,
    /// Per block: its values, 32 bytes (`Q8_0`) or 16 (`Q4_1`).
    qs: Vec<u8>,
}

/// A weight row's planes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowPlanes<'a> {
    pub d: &'a [u16],
    pub m: &'a [u16],
    pub qs: &'a [u8],
}

impl<'a> RowPlanes<'a> {
    /// Rows `first..first + n` of these planes, for rows of `nb` blocks of `vb` value bytes.
    pub(crate) fn rows(self, first: usize, n: usize, nb: usize, vb: usize) -> Self {
        let blocks = first * nb..(first + n) * nb;
        RowPlanes {
            d: &self.d[blocks.clone()],
            m: if self.m.is_empty() {
                &[]
            } else {
                &self.m[blocks.clone()]
            },
            qs: &self.qs[blocks.start * vb..blocks.end * vb],
        }
    }
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
        Ok(Self::split(format, rows, cols, &data))
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
        let data = q.data()?;
        let want = rows * cols / BlockFormat::VALUES * format.block_bytes();
        if data.len() != want {
            candle_core::bail!(
                "a {rows}x{cols} {} tensor holds {} bytes, expected {want}",
                format.name(),
                data.len()
            );
        }
        Ok(Self::split(format, rows, cols, &data))
    }

    /// Splits interleaved GGML blocks (whole, checked by the caller) into planes.
    fn split(format: BlockFormat, rows: usize, cols: usize, data: &[u8]) -> Self {
        let blocks = data.len() / format.block_bytes();
        let half = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
        let mut d = Vec::with_capacity(blocks);
        let mut m = Vec::new();
        let mut qs = Vec::with_capacity(blocks * format.value_bytes());
        for blk in data.chunks_exact(format.block_bytes()) {
            d.push(half(blk));
            match format {
                BlockFormat::Q8_0 => qs.extend_from_slice(&blk[2..]),
                BlockFormat::Q4_1 => {
                    m.push(half(&blk[2..]));
                    qs.extend_from_slice(&blk[4..]);
                }
            }
        }
        Self {
            format,
            rows,
            cols,
            d,
            m,
            qs,
        }
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
        self.d.len() * 2 + self.m.len() * 2 + self.qs.len()
    }

    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.cols / BlockFormat::VALUES
    }

    /// Row `r` as GGML stores it: its blocks, each scale (and minimum) before its values.
    pub fn row(&self, r: usize) -> Vec<u8> {
        let p = self.planes(r, 1);
        let vb = self.format.value_bytes();
        let mut out = Vec::with_capacity(self.blocks_per_row() * self.format.block_bytes());
        for (b, q) in p.qs.chunks_exact(vb).enumerate() {
            out.extend_from_slice(&p.d[b].to_le_bytes());
            if self.format == BlockFormat::Q4_1 {
                out.extend_from_slice(&p.m[b].to_le_bytes());
            }
            out.extend_from_slice(q);
        }
        out
    }

    /// The planes of rows `first..first + n`.
    pub(crate) fn planes(&self, first: usize, n: usize) -> RowPlanes<'_> {
        RowPlanes {
            d: &self.d,
            m: &self.m,
            qs: &self.qs,
        }
        .rows(first, n, self.blocks_per_row(), self.format.value_bytes())
    }

    /// Undoes llama.cpp's q/k row permutation (see [`crate::load::gguf::unpermute`]) on whole
    /// rows: blocks run along rows, so permuting rows of blocks equals quantising the permuted
    /// f32 rows.
    pub fn unpermute_rows(&self, heads: usize) -> Result<Self> {
        if heads == 0 || !self.rows.is_multiple_of(2 * heads) {
            candle_core::bail!("cannot unpermute {} rows over {heads} heads", self.rows);
        }
        let half = self.rows / heads / 2;
        let mut data = Vec::with_capacity(self.bytes());
        for dst in 0..self.rows {
            let (h, rest) = (dst / (2 * half), dst % (2 * half));
            let (a, b) = (rest / half, rest % half);
            data.extend_from_slice(&self.row(h * 2 * half + b * 2 + a));
        }
        Ok(Self::split(self.format, self.rows, self.cols, &data))
    }

    /// The weight in f32 `(rows, cols)`, exactly the values the blocks encode.
    pub fn dequantize(&self, device: &Device) -> Result<Tensor> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        let vb = self.format.value_bytes();
        for (b, qs) in self.qs.chunks_exact(vb).enumerate() {
            let d = f16_bits_to_f32(self.d[b]);
            match self.format {
                BlockFormat::Q8_0 => out.extend(qs.iter().map(|&q| d * f32::from(q as i8))),
                BlockFormat::Q4_1 => {
                    let m = f16_bits_to_f32(self.m[b]);
                    out.extend(qs.iter().map(|&q| m + d * f32::from(q & 0x0F)));
                    out.extend(qs.iter().map(|&q| m + d * f32::from(q >> 4)));
                }
            }
        }
        Tensor::from_vec(out, (self.rows, self.cols), device)
    }

    /// `x W^T` for `x` `(n, cols)` f32 on the CPU, activations quantised to 8 bits per block
    /// (see [`super::kernels::decode_quant_matmul`]); no gradient.
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        super::kernels::decode_quant_matmul::matmul_t(self, x)
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
    fn planes_hold_the_ggml_bytes_and_give_them_back_per_row() {
        // Two rows of two Q4_1 blocks: d, m, then 16 value bytes each (GGML's layout).
        let block = |d: u16, m: u16, v: u8| {
            let mut b = d.to_le_bytes().to_vec();
            b.extend(m.to_le_bytes());
            b.extend([v; 16]);
            b
        };
        let rows: Vec<Vec<u8>> = vec![
            [block(0x3C00, 0x0000, 0x12), block(0x4000, 0xBC00, 0x34)].concat(),
            [block(0x3800, 0x3C00, 0x56), block(0x3400, 0x0001, 0x78)].concat(),
        ];
        let q = QuantWeight::from_bytes(BlockFormat::Q4_1, 2, 64, rows.concat()).unwrap();
        assert_eq!(q.bytes(), 80);
        assert_eq!(q.row(0), rows[0]);
        assert_eq!(q.row(1), rows[1]);
        let p = q.planes(1, 1);
        assert_eq!(p.d, [0x3800, 0x3400]);
        assert_eq!(p.m, [0x3C00, 0x0001]);
        assert_eq!(p.qs, [[0x56u8; 16], [0x78; 16]].concat());
        // Row 0, block 1: d = 2, m = -1, values 4 (low nibbles) and 3 (high nibbles).
        let w: Vec<Vec<f32>> = q.dequantize(&Device::Cpu).unwrap().to_vec2().unwrap();
        assert_eq!(w[0][32], -1.0 + 2.0 * 4.0);
        assert_eq!(w[0][48], -1.0 + 2.0 * 3.0);
        // Q8_0: d then 32 signed bytes.
        let mut b = 0x3C00u16.to_le_bytes().to_vec();
        b.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let q8 = QuantWeight::from_bytes(BlockFormat::Q8_0, 1, 32, b.clone()).unwrap();
        assert_eq!(q8.row(0), b);
        assert!(q8.planes(0, 1).m.is_empty());
    }

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
