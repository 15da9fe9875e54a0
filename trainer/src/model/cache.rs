//! A caller-owned key/value cache for the inference path.
use candle_core::{Result, Tensor};

/// Keys and values of every layer, `(batch, kv_heads, positions, head_dim)` each.
///
/// The caller owns the cache, so one prefilled prompt can be expanded to a group of rows
/// ([`KvCache::expand`]) and finished rows dropped ([`KvCache::select_rows`]).
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// An empty cache for `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            len: 0,
        }
    }

    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `k`, `v` for `layer` and returns the full keys and values.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (k, v) = match &self.layers[layer] {
            None => (k.clone(), v.clone()),
            Some((pk, pv)) => (Tensor::cat(&[pk, k], 2)?, Tensor::cat(&[pv, v], 2)?),
        };
        self.layers[layer] = Some((k.clone(), v.clone()));
        Ok((k, v))
    }

    /// Advances the position counter after all layers appended `n` positions.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Repeats a single-row cache into `rows` identical rows (a group sharing one prompt).
    pub fn expand(&self, rows: usize) -> Result<Self> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                l.as_ref()
                    .map(|(k, v)| -> Result<(Tensor, Tensor)> {
                        Ok((k.repeat((rows, 1, 1, 1))?, v.repeat((rows, 1, 1, 1))?))
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            len: self.len,
        })
    }

    /// Keeps only the given rows, in the given order.
    pub fn select_rows(&mut self, rows: &[u32]) -> Result<()> {
        let Some(device) = self
            .layers
            .iter()
            .flatten()
            .next()
            .map(|(k, _)| k.device().clone())
        else {
            return Ok(());
        };
        let idx = Tensor::new(rows, &device)?;
        for l in self.layers.iter_mut().flatten() {
            *l = (l.0.index_select(&idx, 0)?, l.1.index_select(&idx, 0)?);
        }
        Ok(())
    }
}
