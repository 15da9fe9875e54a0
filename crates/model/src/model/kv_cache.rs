//! A caller-owned key/value cache for the inference path.
//!
//! Keys and values live in preallocated buffers `(batch, kv_heads, capacity, head_dim)` that
//! grow by doubling; a decode step writes its slot in place instead of copying the whole cache.
//! Rows of one batch may come from different prompts ([`KvCache::stack`]): each row keeps its
//! own RoPE position and a validity mask over the shared slots, so rows of different lengths
//! decode together and a finished row can be taken out whole ([`KvCache::row`]) to continue
//! later (a multi-turn conversation reuses its prefix instead of prefilling it again).
use candle_core::{Device, Result, Tensor};

/// Keys and values of every layer, for a batch of rows.
#[derive(Debug)]
pub struct KvCache {
    /// Per layer: key and value buffers `(rows, kv_heads, capacity, head_dim)`.
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// Slots written, shared by every row.
    used: usize,
    /// Per row: the RoPE position of the row's next token.
    positions: Vec<usize>,
    /// Per row: which of the `used` slots hold the row's tokens (false = padding).
    valid: Vec<Vec<bool>>,
}

impl KvCache {
    /// An empty cache for `num_layers` layers; the first forward pass sets the batch size.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: (0..num_layers).map(|_| None).collect(),
            used: 0,
            positions: Vec::new(),
            valid: Vec::new(),
        }
    }

    /// Number of slots written (for a cache that was never stacked: positions cached).
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Rows in the batch (0 before the first forward pass).
    pub fn rows(&self) -> usize {
        self.positions.len()
    }

    /// The RoPE position of each row's next token.
    pub fn positions(&self) -> &[usize] {
        &self.positions
    }

    /// Whether every row sees every slot (no padding between rows of different lengths).
    pub(crate) fn dense(&self) -> bool {
        self.valid.iter().all(|v| v.iter().all(|&ok| ok))
    }

    /// Prepares for an input of `rows` rows: sets the batch size on first use.
    pub(crate) fn begin(&mut self, rows: usize) -> Result<()> {
        if self.positions.is_empty() && self.used == 0 {
            self.positions = vec![0; rows];
            self.valid = vec![Vec::new(); rows];
        }
        if self.positions.len() != rows {
            candle_core::bail!(
                "the cache holds {} rows but the input has {rows}",
                self.positions.len()
            );
        }
        Ok(())
    }

    /// Additive attention mask `(rows, 1, t, used + t)` for `t` new positions: 0 where a query
    /// may see a key, -inf elsewhere (padding slots, and later positions of the new chunk).
    /// `None` when nothing needs masking (a single dense step).
    pub(crate) fn mask(&self, t: usize, device: &Device) -> Result<Option<Tensor>> {
        let dense = self.dense();
        if t == 1 && dense {
            return Ok(None);
        }
        let total = self.used + t;
        let rows = if dense { 1 } else { self.rows() };
        let mut mask = Vec::with_capacity(rows * t * total);
        for r in 0..rows {
            let valid = &self.valid[r];
            for i in 0..t {
                mask.extend(
                    valid
                        .iter()
                        .map(|&ok| if ok { 0.0 } else { f32::NEG_INFINITY }),
                );
                mask.extend((0..t).map(|j| if j <= i { 0.0 } else { f32::NEG_INFINITY }));
            }
        }
        Tensor::from_vec(mask, (rows, 1, t, total), device).map(Some)
    }

    /// Writes `k`, `v` `(rows, kv_heads, t, head_dim)` of `layer` after the used slots and
    /// returns views of all keys and values so far.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        let need = self.used + t;
        let k = k.contiguous()?;
        let v = v.contiguous()?;
        let slot = &mut self.layers[layer];
        let grow = match slot {
            None => true,
            Some((kb, _)) => kb.dim(2)? < need,
        };
        if grow {
            let old_cap = slot.as_ref().map_or(0, |(kb, _)| kb.dim(2).unwrap_or(0));
            let cap = need.max(2 * old_cap).max(16);
            let (b, h, _, d) = k.dims4()?;
            let nk = Tensor::zeros((b, h, cap, d), k.dtype(), k.device())?;
            let nv = Tensor::zeros((b, h, cap, d), v.dtype(), v.device())?;
            if let Some((kb, vb)) = slot.take() {
                nk.slice_set(&kb, 2, 0)?;
                nv.slice_set(&vb, 2, 0)?;
            }
            *slot = Some((nk, nv));
        }
        let (kb, vb) = slot.as_ref().expect("allocated above");
        kb.slice_set(&k, 2, self.used)?;
        vb.slice_set(&v, 2, self.used)?;
        Ok((kb.narrow(2, 0, need)?, vb.narrow(2, 0, need)?))
    }

    /// Advances every row by `n` positions after all layers appended them.
    pub(crate) fn advance(&mut self, n: usize) {
        self.used += n;
        for p in &mut self.positions {
            *p += n;
        }
        for v in &mut self.valid {
            v.extend(std::iter::repeat_n(true, n));
        }
    }

    /// Repeats a single-row cache into `rows` identical rows (a group sharing one prompt).
    pub fn expand(&self, rows: usize) -> Result<Self> {
        if self.rows() > 1 {
            candle_core::bail!("only a single-row cache can be expanded");
        }
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
        let (positions, valid) = match (self.positions.first(), self.valid.first()) {
            (Some(&p), Some(v)) => (vec![p; rows], vec![v.clone(); rows]),
            _ => (Vec::new(), Vec::new()),
        };
        Ok(Self {
            layers,
            used: self.used,
            positions,
            valid,
        })
    }

    /// Keeps only the given rows, in the given order.
    pub fn select_rows(&mut self, rows: &[u32]) -> Result<()> {
        if let Some(&bad) = rows.iter().find(|&&r| r as usize >= self.rows()) {
            candle_core::bail!("row {bad} is outside a cache of {} rows", self.rows());
        }
        self.positions = rows.iter().map(|&r| self.positions[r as usize]).collect();
        self.valid = rows
            .iter()
            .map(|&r| self.valid[r as usize].clone())
            .collect();
        let Some(device) = self.device() else {
            return Ok(());
        };
        let idx = Tensor::new(rows, &device)?;
        for l in self.layers.iter_mut().flatten() {
            *l = (l.0.index_select(&idx, 0)?, l.1.index_select(&idx, 0)?);
        }
        Ok(())
    }

    /// Row `r` alone, its padding dropped: a single-row cache whose slots are its own tokens.
    pub fn row(&self, r: usize) -> Result<Self> {
        if r >= self.rows() {
            candle_core::bail!("row {r} is outside a cache of {} rows", self.rows());
        }
        let keep: Vec<u32> = (0..self.used)
            .filter(|&s| self.valid[r][s])
            .map(|s| s as u32)
            .collect();
        let n = keep.len();
        let layers = match self.device() {
            None => self.layers.iter().map(|_| None).collect(),
            Some(device) => {
                let slots = Tensor::new(keep.as_slice(), &device)?;
                self.layers
                    .iter()
                    .map(|l| {
                        l.as_ref()
                            .map(|(k, v)| -> Result<(Tensor, Tensor)> {
                                let pick = |t: &Tensor| -> Result<Tensor> {
                                    t.narrow(0, r, 1)?.index_select(&slots, 2)
                                };
                                Ok((pick(k)?, pick(v)?))
                            })
                            .transpose()
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        Ok(Self {
            layers,
            used: n,
            positions: vec![self.positions[r]],
            valid: vec![vec![true; n]],
        })
    }

    /// Drops every slot from `len` on in a single-row cache without padding, so that it holds
    /// the first `len` tokens of its sequence (for reusing a shared prefix).
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if self.rows() != 1 || !self.dense() {
            candle_core::bail!("only a single-row cache without padding can be truncated");
        }
        if len < self.used {
            self.used = len;
            self.positions[0] = len;
            self.valid[0].truncate(len);
        }
        Ok(())
    }

    /// Puts the rows of several caches into one batch, in order. Shorter caches are padded
    /// at the end of the slots; each row keeps its positions, so rows of different lengths
    /// decode together.
    pub fn stack(caches: Vec<KvCache>) -> Result<Self> {
        let Some(first) = caches.first() else {
            candle_core::bail!("nothing to stack");
        };
        let num_layers = first.layers.len();
        let used = caches.iter().map(|c| c.used).max().unwrap_or(0);
        if caches.iter().any(|c| c.layers.len() != num_layers) {
            candle_core::bail!("cannot stack caches of models with different layer counts");
        }
        if caches.iter().any(|c| c.rows() == 0) {
            candle_core::bail!("cannot stack an empty cache");
        }
        let mut positions = Vec::new();
        let mut valid = Vec::new();
        for c in &caches {
            positions.extend_from_slice(&c.positions);
            for v in &c.valid {
                let mut v = v.clone();
                v.resize(used, false);
                valid.push(v);
            }
        }
        let cap = used.max(16);
        let mut layers = Vec::with_capacity(num_layers);
        for l in 0..num_layers {
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            for c in &caches {
                let (k, v) = c.layers[l]
                    .as_ref()
                    .ok_or_else(|| candle_core::Error::Msg("cannot stack an empty cache".into()))?;
                ks.push(pad_slots(k, c.used, cap)?);
                vs.push(pad_slots(v, c.used, cap)?);
            }
            layers.push(Some((Tensor::cat(&ks, 0)?, Tensor::cat(&vs, 0)?)));
        }
        Ok(Self {
            layers,
            used,
            positions,
            valid,
        })
    }

    fn device(&self) -> Option<Device> {
        self.layers
            .iter()
            .flatten()
            .next()
            .map(|(k, _)| k.device().clone())
    }
}

/// The first `used` slots of `t`, zero-padded to `cap` slots (a fresh contiguous tensor).
fn pad_slots(t: &Tensor, used: usize, cap: usize) -> Result<Tensor> {
    let live = t.narrow(2, 0, used)?;
    if cap == used {
        return live.contiguous();
    }
    let (b, h, _, d) = t.dims4()?;
    let zeros = Tensor::zeros((b, h, cap - used, d), t.dtype(), t.device())?;
    Tensor::cat(&[&live, &zeros], 2)
}
