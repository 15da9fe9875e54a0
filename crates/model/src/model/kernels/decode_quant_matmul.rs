//! `x W^T` for a [`QuantWeight`]: the decode step's product, reading each block once.
//!
//! The input rows are quantised first, as llama.cpp does: each block of 32 values gets the
//! scale `s = max|x| / 127` and the bytes `round(x / s)` (half away from zero), and for `Q4_1`
//! also the block sum `s * sum(bytes)`. A block's product is then an exact integer dot
//! product times the two scales (`Q8_0`), plus the weight's minimum times the input's block
//! sum (`Q4_1`). Rounding the input to 8 bits is the only approximation beyond the weights'
//! own: for each block the error is at most `s / 2` per input value, so an output differs
//! from the product with the dequantised weight by at most
//! `sum over blocks of (s_block / 2) * sum |w|` (plus f32 rounding).
//!
//! As in [`super::decode_matmul`], each weight row is read once and multiplied with up to
//! [`GROUP`] input rows while it sits in registers, so a step of eight rows costs little more
//! memory traffic than a step of one. The inner loop exists for AVX-512 VNNI, for AVX2 with FMA
//! and F16C (the best one the CPU has is chosen at run time; see [`Kernel`]) and in portable
//! Rust. The two SIMD loops give the same bits (the AVX-512 one reproduces the AVX2 one's
//! summation order); the portable one sums in another order, so its results may differ in the
//! last bits ([`kernel_name`] says which one runs).
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use candle_core::{CpuStorage, Result, Storage, Tensor};
pub use lora::LoraFactors;

use crate::model::decode_weights::DecodeActivations;
use crate::model::quant::{BlockFormat, QuantWeight, RowPlanes, f16_bits_to_f32};

/// Input rows multiplied together with one pass over a weight row.
pub const GROUP: usize = 8;

/// Most input rows the inference path sends through the blocks with 8-bit inputs (a longer
/// input, a prefill, runs the f32 GEMM, which is faster there), and most rows a fused LoRA
/// update takes. With f32 inputs a prefill goes through the blocks too, eight rows per pass
/// over each weight row: 1.4-1.6x the f32 GEMM's tokens/s on SmolLM2-135M (see
/// docs/benchmarks.md), with its adapter added by candle ops.
pub const MAX_ROWS: usize = 16;

/// Output columns per parallel task.
const BLOCK: usize = 32;

const QK: usize = BlockFormat::VALUES;

/// The input rows in 8-bit blocks.
struct Activations {
    /// Blocks per row.
    blocks: usize,
    /// Per row and block: the scale.
    scales: Vec<f32>,
    /// Per row and block: the scale times the sum of the bytes.
    sums: Vec<f32>,
    /// Per row and block: 32 signed bytes.
    qs: Vec<i8>,
}

impl Activations {
    /// Quantises `rows` rows of `k` values (`k` a multiple of 32), with AVX2 when `simd`:
    /// the same bytes, scales and sums either way.
    fn quantize(x: &[f32], rows: usize, k: usize, simd: bool) -> Self {
        let blocks = k / QK;
        let mut scales = vec![0f32; rows * blocks];
        let mut sums = vec![0f32; rows * blocks];
        let mut qs = vec![0i8; rows * k];
        let it = x
            .chunks_exact(QK)
            .zip(qs.chunks_exact_mut(QK))
            .zip(scales.iter_mut().zip(sums.iter_mut()));
        for ((block, q), (d, sum)) in it {
            #[cfg(target_arch = "x86_64")]
            if simd {
                // SAFETY: `simd` is only set when the CPU has AVX2; both blocks hold 32.
                #[allow(unsafe_code)]
                unsafe {
                    (*d, *sum) = avx2::quantize_block(block, q)
                };
                continue;
            }
            let _ = simd;
            (*d, *sum) = quantize_block(block, q);
        }
        Self {
            blocks,
            scales,
            sums,
            qs,
        }
    }
}

/// One block of 32 inputs: `q = round(v / d)` with `d = max|v| / 127` (0 for an all-zero
/// block); returns `d` and `d * sum(q)`.
fn quantize_block(block: &[f32], q: &mut [i8]) -> (f32, f32) {
    let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (o, &v) in q.iter_mut().zip(block) {
        *o = round_to_i8(v * id);
        sum += i32::from(*o);
    }
    (d, d * sum as f32)
}

/// `y.round() as i8` (half away from zero, saturating, NaN to 0) without the library call
/// that `round` is on the baseline target. After the clamp the truncation is exact, and so is
/// `y - t` (the fraction of `y`: Sterbenz), so comparing it with one half decides exactly as
/// `round` does.
#[inline(always)]
fn round_to_i8(y: f32) -> i8 {
    let y = y.clamp(-128.0, 127.0);
    let t = y as i32;
    let f = y - t as f32;
    // Branch-free: the halfway test goes either way at random.
    let r = t + i32::from(f >= 0.5) - i32::from(f <= -0.5);
    r as i8
}

/// An inner loop of [`matmul_t`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Portable Rust (any CPU).
    Portable,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 F/BW/VL with VNNI (and AVX2, FMA, F16C): the same results as [`Self::Avx2`].
    Avx512Vnni,
}

impl Kernel {
    /// The inner loop's name for inputs taken as `activations`, as a run's decode path
    /// records it: `quant-f32act/avx512` (the f32 loop needs only AVX-512 F of this level),
    /// `quant-q8act/avx512vnni`, ...
    pub fn loop_name(self, activations: DecodeActivations) -> String {
        match activations {
            DecodeActivations::F32 => {
                let isa = match self {
                    Self::Avx512Vnni => "avx512",
                    other => other.name(),
                };
                format!("quant-f32act/{isa}")
            }
            DecodeActivations::Q8 => format!("quant-q8act/{}", self.name()),
        }
    }

    /// The kernel's name, as chosen on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Avx2 => "avx2",
            Self::Avx512Vnni => "avx512vnni",
        }
    }

    /// The kernel named `name` (see [`Self::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Portable, Self::Avx2, Self::Avx512Vnni]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// Whether this CPU can run the kernel.
    pub fn supported(self) -> bool {
        match self {
            Self::Portable => true,
            Self::Avx2 => has_avx2_fma_f16c(),
            Self::Avx512Vnni => has_avx2_fma_f16c() && has_avx512_vnni(),
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn detect() -> Self {
        if Self::Avx512Vnni.supported() {
            Self::Avx512Vnni
        } else if Self::Avx2.supported() {
            Self::Avx2
        } else {
            Self::Portable
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Portable => 1,
            Self::Avx2 => 2,
            Self::Avx512Vnni => 3,
        }
    }
}

/// The kernel [`force_kernel`] chose (0: none, detect).
static FORCED: AtomicU8 = AtomicU8::new(0);

/// Makes every later [`matmul_t`] in this process use `kernel` (`None`: the detected one),
/// for benchmarks comparing kernels in one run. Fails when the CPU lacks it.
pub fn force_kernel(kernel: Option<Kernel>) -> Result<()> {
    if let Some(k) = kernel
        && !k.supported()
    {
        candle_core::bail!("this CPU cannot run the {} quantised kernel", k.name());
    }
    FORCED.store(kernel.map_or(0, Kernel::code), Ordering::Relaxed);
    Ok(())
}

/// The kernel [`matmul_t`] uses now: the forced one, else the fastest this CPU runs.
pub fn kernel() -> Kernel {
    match FORCED.load(Ordering::Relaxed) {
        1 => Kernel::Portable,
        2 => Kernel::Avx2,
        3 => Kernel::Avx512Vnni,
        _ => Kernel::detect(),
    }
}

/// Which inner loop [`matmul_t`] uses: `"avx512vnni"`, `"avx2"` or `"portable"`.
pub fn kernel_name() -> &'static str {
    kernel().name()
}

fn has_avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::decode_matmul::has_avx2_fma() && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn has_avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x W^T` for `x` `(rows, in)` f32 on the CPU and `w` `(out, in)`, with f32 inputs (see
/// [`f32_act`]); returns `(rows, out)`.
pub fn matmul_t(w: &QuantWeight, x: &Tensor) -> Result<Tensor> {
    matmul_t_with(w, x, kernel(), DecodeActivations::F32, None)
}

/// One product of [`matmul_t_fused`]: a weight and, optionally, the adapter added to it.
#[derive(Debug, Clone, Copy)]
pub struct Product<'a> {
    /// The quantised weight `(out, in)`.
    pub weight: &'a QuantWeight,
    /// A LoRA adapter added inside the product.
    pub lora: Option<LoraFactors<'a>>,
}

/// [`matmul_t`] with a chosen kernel (which the CPU must support), input precision and an
/// optional adapter.
pub fn matmul_t_with(
    w: &QuantWeight,
    x: &Tensor,
    kernel: Kernel,
    activations: DecodeActivations,
    lora: Option<LoraFactors<'_>>,
) -> Result<Tensor> {
    let mut out = matmul_t_fused(x, &[Product { weight: w, lora }], kernel, activations)?;
    Ok(out.pop().expect("one product gives one output"))
}

/// `x W_p^T` (plus each adapter) for every product `p` of one input `x` `(rows, in)`: the
/// input is prepared once (quantised, for [`DecodeActivations::Q8`]) and every product's
/// blocks are shared out in one parallel job (a decode step's q/k/v and gate/up products),
/// with the same bits as one call each. Returns `(rows, out_p)` per product.
pub fn matmul_t_fused(
    x: &Tensor,
    products: &[Product<'_>],
    kernel: Kernel,
    activations: DecodeActivations,
) -> Result<Vec<Tensor>> {
    if !kernel.supported() {
        candle_core::bail!("this CPU cannot run the {} quantised kernel", kernel.name());
    }
    let (rows, k) = x.dims2()?;
    for p in products {
        let (_, wk) = p.weight.dims();
        if k != wk {
            candle_core::bail!("quantised matmul: input has {k} features, weight takes {wk}");
        }
    }
    if rows == 0 {
        return products
            .iter()
            .map(|p| Tensor::zeros((0, p.weight.dims().0), candle_core::DType::F32, x.device()))
            .collect();
    }
    let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
    let simd = lora::has_avx();
    let act = match activations {
        DecodeActivations::Q8 => Some(Activations::quantize(
            &xs,
            rows,
            k,
            kernel != Kernel::Portable,
        )),
        DecodeActivations::F32 => None,
    };
    let adapters = products
        .iter()
        .map(|p| {
            p.lora
                .map(|l| Adapter::new(l, rows, p.weight.dims()))
                .transpose()
        })
        .collect::<Result<Vec<_>>>()?;
    // The factors' values, borrowed from their storage for the whole job.
    let guards: Vec<_> = adapters
        .iter()
        .map(|a| {
            a.as_ref()
                .map(|a| (a.a.storage_and_layout(), a.b.storage_and_layout()))
        })
        .collect();
    let factors = guards
        .iter()
        .zip(&adapters)
        .map(|(g, a)| match (g, a) {
            (Some(((sa, la), (sb, lb))), Some(ad)) => {
                let (Storage::Cpu(CpuStorage::F32(va)), Storage::Cpu(CpuStorage::F32(vb))) =
                    (&**sa, &**sb)
                else {
                    candle_core::bail!("a LoRA factor must be f32 on the CPU");
                };
                let (a_len, b_len) = (ad.a.elem_count(), ad.b.elem_count());
                Ok(Some((
                    &va[la.start_offset()..][..a_len],
                    &vb[lb.start_offset()..][..b_len],
                )))
            }
            _ => Ok(None),
        })
        .collect::<Result<Vec<Option<(&[f32], &[f32])>>>>()?;
    // `x A^T` per adapter, computed once by whichever thread gets there first: the job's
    // first tasks compute one each, so they normally run in parallel before any block needs
    // them; a block that finds one missing computes it (or waits for the thread that does).
    let xa: Vec<OnceLock<Vec<f32>>> = products.iter().map(|_| OnceLock::new()).collect();
    let project = |i: usize| -> &[f32] {
        xa[i].get_or_init(|| {
            let (a, _) = factors[i].expect("only adapted products are projected");
            let rank = adapters[i].as_ref().map_or(0, |ad| ad.rank);
            lora::project(&xs, rows, a, rank, simd)
        })
    };
    let adapted: Vec<usize> = (0..products.len())
        .filter(|&i| factors[i].is_some())
        .collect();
    // Output transposed, (out, rows), the products back to back: after one empty part per
    // adapter (its projection), each task owns a block of one product's weight rows.
    let mut parts = Vec::new();
    let mut ends = vec![0; adapted.len()];
    let mut offsets = Vec::with_capacity(products.len());
    let mut total = 0;
    for (i, p) in products.iter().enumerate() {
        let n = p.weight.dims().0;
        offsets.push(total);
        for first in (0..n).step_by(BLOCK) {
            parts.push((i, first));
            ends.push(total + (first + BLOCK).min(n) * rows);
        }
        total += n * rows;
    }
    let mut out_t = vec![0f32; total];
    super::decode_pool::for_each_part_mut(&mut out_t, &ends, |t, chunk| {
        if t < adapted.len() {
            project(adapted[t]);
            return;
        }
        let (i, first) = parts[t - adapted.len()];
        let w = products[i].weight;
        let len = chunk.len() / rows;
        let planes = w.planes(first, len);
        let format = w.format();
        match &act {
            None => f32_rows(kernel, format, planes, &xs, k, rows, chunk),
            Some(act) => q8_rows(kernel, format, planes, act, rows, chunk),
        }
        if let (Some(ad), Some((_, bv))) = (&adapters[i], factors[i]) {
            let b_rows = &bv[first * ad.rank..(first + len) * ad.rank];
            lora::add_block(chunk, rows, project(i), b_rows, ad.scale, simd);
        }
    });
    if rows == 1 && products.len() == 1 {
        // One row of one product: the transposed output is the output.
        let n = products[0].weight.dims().0;
        return Ok(vec![Tensor::from_vec(out_t, (1, n), x.device())?]);
    }
    products
        .iter()
        .zip(offsets)
        .map(|(p, off)| {
            let n = p.weight.dims().0;
            let part = &out_t[off..off + n * rows];
            let out = if rows == 1 {
                part.to_vec()
            } else {
                let mut out = vec![0f32; rows * n];
                for (o, cells) in part.chunks(rows).enumerate() {
                    for (r, &v) in cells.iter().enumerate() {
                        out[r * n + o] = v;
                    }
                }
                out
            };
            Tensor::from_vec(out, (rows, n), x.device())
        })
        .collect()
}

/// One task's weight rows times f32 inputs, on `kernel` (which the caller checked).
fn f32_rows(
    kernel: Kernel,
    format: BlockFormat,
    planes: RowPlanes<'_>,
    xs: &[f32],
    k: usize,
    rows: usize,
    out: &mut [f32],
) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked `kernel.supported()`: AVX-512 F, AVX2, FMA and F16C.
        #[allow(unsafe_code)]
        Kernel::Avx512Vnni => unsafe { f32_act::avx512::rows(format, planes, xs, k, rows, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked `kernel.supported()`: AVX2, FMA and F16C.
        #[allow(unsafe_code)]
        Kernel::Avx2 => unsafe { f32_act::avx2::rows(format, planes, xs, k, rows, out) },
        _ => f32_act::rows_portable(format, planes, xs, k, rows, out),
    }
}

/// One task's weight rows times 8-bit inputs, on `kernel` (which the caller checked).
fn q8_rows(
    kernel: Kernel,
    format: BlockFormat,
    planes: RowPlanes<'_>,
    act: &Activations,
    rows: usize,
    out: &mut [f32],
) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked `kernel.supported()`: AVX-512 F/BW/VL/VNNI, AVX2, FMA
        // and F16C.
        #[allow(unsafe_code)]
        Kernel::Avx512Vnni => unsafe { avx512::rows(format, planes, act, rows, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked `kernel.supported()`: AVX2, FMA and F16C.
        #[allow(unsafe_code)]
        Kernel::Avx2 => unsafe { avx2::rows(format, planes, act, rows, out) },
        _ => {
            let vb = format.value_bytes();
            for (j, cells) in out.chunks_mut(rows).enumerate() {
                let one = planes.rows(j, 1, act.blocks, vb);
                row_portable(format, one, act, cells);
            }
        }
    }
}

/// An adapter checked against its product, its factors contiguous.
struct Adapter {
    /// `(rank, in)`.
    a: Tensor,
    /// `(out, rank)`.
    b: Tensor,
    rank: usize,
    scale: f32,
}

impl Adapter {
    fn new(l: LoraFactors<'_>, rows: usize, (n, k): (usize, usize)) -> Result<Self> {
        if rows > MAX_ROWS {
            candle_core::bail!("a fused LoRA update takes at most {MAX_ROWS} rows, got {rows}");
        }
        let (rank, ak) = l.a.dims2()?;
        if ak != k || l.b.dims2()? != (n, rank) {
            candle_core::bail!(
                "LoRA factors {:?} and {:?} do not fit a {n}x{k} weight",
                l.a.dims(),
                l.b.dims()
            );
        }
        Ok(Self {
            a: l.a.contiguous()?,
            b: l.b.contiguous()?,
            rank,
            scale: l.scale,
        })
    }
}

/// `out[r] = x[r] . w` for one weight row (its planes), in portable Rust.
fn row_portable(format: BlockFormat, w: RowPlanes<'_>, act: &Activations, out: &mut [f32]) {
    let nb = act.blocks;
    let vb = format.value_bytes();
    for (xr, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for (b, qs) in w.qs.chunks_exact(vb).enumerate() {
            let d = f16_bits_to_f32(w.d[b]);
            let xq = &act.qs[(xr * nb + b) * QK..][..QK];
            let sx = act.scales[xr * nb + b];
            match format {
                BlockFormat::Q8_0 => {
                    let dot: i32 = qs
                        .iter()
                        .zip(xq)
                        .map(|(&w, &x)| i32::from(w as i8) * i32::from(x))
                        .sum();
                    acc += d * sx * dot as f32;
                }
                BlockFormat::Q4_1 => {
                    let m = f16_bits_to_f32(w.m[b]);
                    let lo: i32 = qs
                        .iter()
                        .zip(&xq[..16])
                        .map(|(&w, &x)| i32::from(w & 0x0F) * i32::from(x))
                        .sum();
                    let hi: i32 = qs
                        .iter()
                        .zip(&xq[16..])
                        .map(|(&w, &x)| i32::from(w >> 4) * i32::from(x))
                        .sum();
                    acc += d * sx * (lo + hi) as f32 + m * act.sums[xr * nb + b];
                }
            }
        }
        *o = acc;
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx512;

mod f32_act;

mod lora;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod f32_act_tests;

#[cfg(test)]
mod rounding_tests {
    use super::round_to_i8;

    #[test]
    fn rounding_matches_round_everywhere_the_quantiser_can_reach() {
        // Every halfway case and its neighbours, both signs, out of range, and NaN.
        let mut ys = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            0.0,
            -0.0,
        ];
        for i in -300..=300 {
            let h = i as f32 * 0.5;
            ys.extend([
                h,
                f32::from_bits(h.to_bits() + 1),
                f32::from_bits(h.to_bits().max(1) - 1),
            ]);
        }
        ys.extend((0..100_000).map(|i| -130.0 + i as f32 * 0.0026));
        for y in ys {
            assert_eq!(round_to_i8(y), y.round() as i8, "{y}");
        }
    }
}
