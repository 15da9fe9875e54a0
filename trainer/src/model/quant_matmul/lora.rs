//! A LoRA adapter added inside the quantised product: `y += scale * (x A^T) B^T` for the few
//! rows of a decode step, without the two small GEMMs, the scaling and the addition that the
//! candle ops would cost per projection (their fixed overhead exceeded the arithmetic).
use candle_core::{CpuStorage, Result, Storage, Tensor};

/// A LoRA adapter's factors: `a` `(rank, in)`, `b` `(out, rank)`, both f32 on the CPU.
#[derive(Debug, Clone, Copy)]
pub struct LoraFactors<'a> {
    /// `(rank, in_features)`.
    pub a: &'a Tensor,
    /// `(out_features, rank)`.
    pub b: &'a Tensor,
    /// `alpha / rank`.
    pub scale: f32,
}

/// Runs `f` on the f32 values of a contiguous CPU tensor, without copying them.
pub(super) fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(v)) = &*storage else {
        candle_core::bail!("a LoRA factor must be f32 on the CPU");
    };
    Ok(f(&v[layout.start_offset()..][..t.elem_count()]))
}

/// `x A^T` for `x` `(rows, in)` row-major: `(rows, rank)`, row-major, so that
/// [`add_column`] takes one contiguous dot product per output cell. Each value is summed in
/// eight interleaved partial sums, then in lane order.
pub(super) fn project(x: &[f32], rows: usize, a: &[f32], rank: usize) -> Vec<f32> {
    let k = a.len() / rank.max(1);
    let mut out = Vec::with_capacity(rank * rows);
    for r in 0..rows {
        let xr = &x[r * k..][..k];
        out.extend(a.chunks_exact(k).map(|ar| dot(xr, ar)));
    }
    out
}

/// `cells[r] += scale * (xa[r] . b_row)` for one output column's factor row (`xa` from
/// [`project`], one row of `rank` values per input row). Each cell is one dot product
/// summed in registers (an accumulator array indexed by row kept every partial sum in
/// memory, a store-to-load chain per rank step that cost a third of the block product).
pub(super) fn add_column(cells: &mut [f32], xa: &[f32], b_row: &[f32], scale: f32) {
    let rank = b_row.len();
    for (c, xr) in cells.iter_mut().zip(xa.chunks_exact(rank.max(1))) {
        *c += scale * dot(xr, b_row);
    }
}

/// A dot product in eight independent partial sums (plain multiply and add: `mul_add` would
/// be a library call on the baseline target).
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let (xt, yt) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for i in 0..8 {
            lanes[i] += a[i] * b[i];
        }
    }
    let mut s = lanes.iter().sum::<f32>();
    for (a, b) in xt.iter().zip(yt) {
        s += a * b;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_and_add_column_compute_the_low_rank_update() {
        // x (2 x 3), A (2 x 3), B (1 x 2): by hand, x A^T = [[1*1 + 2*0 + 3*2, 1*(-1) + 2*1 + 3*0],
        // [0 + 0 + 2*2, 0 + 1 + 0]] = [[7, 1], [4, 1]]; then (x A^T) B^T with B = [0.5, -2]
        // is [7*0.5 - 2*1, 4*0.5 - 2*1] = [1.5, 0]; scaled by 2 and added to [10, 20]:
        // [13, 20].
        let x = [1.0, 2.0, 3.0, 0.0, 1.0, 2.0];
        let a = [1.0, 0.0, 2.0, -1.0, 1.0, 0.0];
        let xa = project(&x, 2, &a, 2);
        // Row-major: one row of `rank` values per input row.
        assert_eq!(xa, vec![7.0, 1.0, 4.0, 1.0]);
        let mut cells = [10.0, 20.0];
        add_column(&mut cells, &xa, &[0.5, -2.0], 2.0);
        assert_eq!(cells, [13.0, 20.0]);
    }

    #[test]
    fn dot_covers_whole_lanes_and_the_remainder() {
        let x: Vec<f32> = (1..=19).map(|v| v as f32).collect();
        let y = vec![1.0f32; 19];
        assert_eq!(dot(&x, &y), 190.0);
    }
}
