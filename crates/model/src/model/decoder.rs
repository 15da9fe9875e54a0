//! The Llama / Qwen2 / Qwen3 decoder with a training path and a KV-cache inference path.
use std::collections::BTreeMap;
use std::sync::Arc;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};

use super::config::{Family, ModelConfig};
use super::decode_weights::{DecodeActivations, DecodePath, DecodeWeights};
use super::kernels::decode_ops;
use super::kv_cache::KvCache;
use super::linear::{Linear, Pass, param};
use super::lora::LoraConfig;
use super::quant::{BlockFormat, QuantWeight};
use super::rope::RotaryTables;
use super::train_ops;

mod saved;

/// RMSNorm with a learned scale.
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn new(dim: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb.get_with_hints(dim, "weight", candle_nn::Init::Const(1.0))?,
            eps,
        })
    }

    fn forward(&self, xs: &Tensor, pass: Pass) -> Result<Tensor> {
        if pass.train && pass.fused {
            train_ops::rms_norm_fused(xs, &param(&self.weight, pass.grad_base), self.eps)
        } else if pass.train {
            train_ops::rms_norm(xs, &param(&self.weight, pass.grad_base), self.eps)
        } else {
            decode_ops::rms_norm(xs, &self.weight.detach(), self.eps as f32)
        }
    }
}

/// How the training path computes attention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrainAttention {
    /// Block by block with an online softmax, keeping only each query row's log-sum-exp for
    /// the backward pass, which recomputes the probabilities (FlashAttention-2): memory
    /// linear in the length. The default, on f32 CPU tensors (elsewhere [`Self::Plain`]).
    #[default]
    Blockwise,
    /// `causal_softmax(q kᵀ) v` through candle's autograd, keeping every head's `t x t`
    /// scores and probabilities: memory quadratic in the length. For comparison.
    Plain,
}

/// Which ops the training path runs for RMSNorm, SiLU·up and the loss's log-probabilities
/// and entropies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrainOps {
    /// One op each with its own backward and its rows on rayon's threads
    /// ([`train_ops::rms_norm_fused`], [`train_ops::silu_mul_fused`],
    /// [`train_ops::target_logprob_entropy`]): fewer intermediates kept for the backward and
    /// no single-threaded stretches. The default, on f32 CPU tensors (elsewhere
    /// [`Self::Composed`]).
    #[default]
    Fused,
    /// Composed from candle's ops through its autograd, one thread each. For comparison.
    Composed,
}

/// What the training path keeps for the backward pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainMemory {
    /// Each layer's input only (activation checkpointing): the forward runs the layers
    /// without an autograd graph, and the backward recomputes one layer at a time from its
    /// input with its graph and differentiates it against its output's gradient
    /// ([`Decoder::hidden_train_checkpointed`], [`Decoder::backward_layers`]). Memory per
    /// token: one `hidden_size` vector per layer plus one layer's activations, for one more
    /// forward pass of compute.
    Checkpointed,
    /// Every layer's activations until the backward ends (candle's autograd as it is).
    Kept,
    /// What each layer's own hand-written backward reads: the forward runs the layers
    /// without an autograd graph and keeps per layer its input, its post-attention residual,
    /// q, k and v after RoPE, the attention's output and log-sum-exp, the MLP's gate and up
    /// and the adapters' small `x Aᵀ` products; the backward then computes, from the top
    /// layer down, each layer's input gradient and its weights' gradients with plain tensor
    /// ops and the training kernels' backwards, without candle's autograd and without
    /// running any projection again ([`Decoder::hidden_train_checkpointed`],
    /// [`Decoder::backward_layers`]). Memory per token: about `4 hidden + 2 intermediate`
    /// values per layer (SmolLM2-135M: 5,825 a layer, 0.7 MB over its 30), for the compute of
    /// [`Self::Kept`]. Needs the default [`TrainOps::Fused`] and [`TrainAttention::Blockwise`]
    /// on f32 CPU tensors; elsewhere it is [`Self::Checkpointed`]. The default: SmolLM2-135M's
    /// LoRA update at 4 x 128 tokens ran at 1.43x torch + PEFT's speed in 0.42x its memory
    /// (docs/benchmarks.md).
    #[default]
    Saved,
}

/// What [`Decoder::hidden_train_checkpointed`] keeps for [`Decoder::backward_layers`]: the
/// token ids, per layer its input (detached; [`TrainMemory::Checkpointed`]) or what its own
/// backward reads ([`TrainMemory::Saved`]), and the last layer's output as the variable the
/// loss's own backward stops at.
#[derive(Debug)]
pub struct LayerCheckpoints {
    ids: Tensor,
    layers: Kept,
    last: Var,
}

/// Per layer, what [`LayerCheckpoints`] keeps.
#[derive(Debug)]
enum Kept {
    Inputs(Vec<Tensor>),
    Saved(Vec<saved::SavedLayer>),
}

impl LayerCheckpoints {
    /// The last layer's output: its gradient in the loss's [`GradStore`] is where
    /// [`Decoder::backward_layers`] starts.
    pub fn output(&self) -> &Tensor {
        self.last.as_tensor()
    }
}

#[derive(Debug, Clone)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    train_attention: TrainAttention,
}

impl Attention {
    fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        let (h, kv, d) = (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim());
        let bias = cfg.qkv_bias();
        let qk_norm = matches!(cfg.family(), Ok(Family::Qwen3));
        let norm = |name: &str| -> Result<Option<RmsNorm>> {
            if qk_norm {
                Ok(Some(RmsNorm::new(d, cfg.rms_norm_eps, vb.pp(name))?))
            } else {
                Ok(None)
            }
        };
        Ok(Self {
            q_proj: Linear::new(cfg.hidden_size, h * d, bias, vb.pp("q_proj"))?,
            k_proj: Linear::new(cfg.hidden_size, kv * d, bias, vb.pp("k_proj"))?,
            v_proj: Linear::new(cfg.hidden_size, kv * d, bias, vb.pp("v_proj"))?,
            o_proj: Linear::new(h * d, cfg.hidden_size, cfg.attention_bias, vb.pp("o_proj"))?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            heads: h,
            kv_heads: kv,
            head_dim: d,
            train_attention: TrainAttention::default(),
        })
    }

    /// `xs` is `(b, t, hidden)`; `cos`/`sin` are the rotary tables of the new positions;
    /// `cache` is `Some((cache, layer))` on the inference path, with its attention `mask`.
    fn forward(
        &self,
        xs: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        pass: Pass,
        cache: Option<(&mut KvCache, usize)>,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t, _) = xs.dims3()?;
        let [q, k, v] = Linear::forward_many([&self.q_proj, &self.k_proj, &self.v_proj], xs, pass)?;
        let mut q = q.reshape((b, t, self.heads, self.head_dim))?;
        let mut k = k.reshape((b, t, self.kv_heads, self.head_dim))?;
        let v = v.reshape((b, t, self.kv_heads, self.head_dim))?;
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q, pass)?;
            k = kn.forward(&k, pass)?;
        }
        let q = q.transpose(1, 2)?.contiguous()?;
        let k = k.transpose(1, 2)?.contiguous()?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let out = match cache {
            None => {
                let (q, k) = (
                    train_ops::rope(&q, cos, sin)?,
                    train_ops::rope(&k, cos, sin)?,
                );
                let blockwise = self.train_attention == TrainAttention::Blockwise
                    && q.device().is_cpu()
                    && q.dtype() == DType::F32;
                if blockwise {
                    super::kernels::train_attention::attention(&q, &k, &v, scale)?
                } else {
                    let n_rep = self.heads / self.kv_heads;
                    let k = train_ops::repeat_kv(&k, n_rep)?.contiguous()?;
                    let v = train_ops::repeat_kv(&v, n_rep)?.contiguous()?;
                    let scores = (q * scale)?.matmul(&k.t()?)?;
                    train_ops::causal_softmax(&scores)?.matmul(&v)?
                }
            }
            Some((cache, layer)) => {
                let q = decode_ops::rope(&q, cos, sin)?;
                let k = decode_ops::rope(&k, cos, sin)?;
                let (k, v) = cache.append(layer, &k, &v)?;
                self.attend_cached(&q, &k, &v, mask, scale)?
            }
        };
        let out = out
            .transpose(1, 2)?
            .reshape((b, t, self.heads * self.head_dim))?;
        self.o_proj.forward(&out, pass)
    }

    /// Attention over cached keys and values `(b, kv_heads, slots, d)` (strided views of the
    /// cache buffers, read in place). Query heads are grouped by the key/value head they
    /// share, so keys and values are never repeated: `q` `(b, heads, t, d)` is viewed as
    /// `(b, kv_heads, n_rep * t, d)`. Returns `(b, heads, t, d)`.
    fn attend_cached(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        scale: f64,
    ) -> Result<Tensor> {
        let (b, h, t, d) = q.dims4()?;
        if t == 1 && q.device().is_cpu() && q.dtype() == candle_core::DType::F32 {
            return super::kernels::decode_attention::attend_one(q, k, v, mask, scale);
        }
        let kvh = self.kv_heads;
        let slots = k.dim(2)?;
        let q = (q.reshape((b, kvh, (h / kvh) * t, d))? * scale)?;
        let mut scores = q.matmul(&k.t()?)?;
        if let Some(mask) = mask {
            scores = scores
                .reshape((b, h, t, slots))?
                .broadcast_add(mask)?
                .reshape((b, kvh, (h / kvh) * t, slots))?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        probs.matmul(v)?.reshape((b, h, t, d))
    }
}

#[derive(Debug, Clone)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_proj: Linear::new(h, i, false, vb.pp("gate_proj"))?,
            up_proj: Linear::new(h, i, false, vb.pp("up_proj"))?,
            down_proj: Linear::new(i, h, false, vb.pp("down_proj"))?,
        })
    }

    fn forward(&self, xs: &Tensor, pass: Pass) -> Result<Tensor> {
        let [gate, up] = Linear::forward_many([&self.gate_proj, &self.up_proj], xs, pass)?;
        let act = if pass.train && pass.fused {
            train_ops::silu_mul_fused(&gate, &up)?
        } else if pass.train {
            (gate.silu()? * up)?
        } else {
            decode_ops::silu_mul(&gate, &up)?
        };
        self.down_proj.forward(&act, pass)
    }
}

#[derive(Debug, Clone)]
struct Layer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Layer {
    fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            input_layernorm: RmsNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("input_layernorm"),
            )?,
            self_attn: Attention::new(cfg, vb.pp("self_attn"))?,
            post_attention_layernorm: RmsNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
            mlp: Mlp::new(cfg, vb.pp("mlp"))?,
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        rope: (&Tensor, &Tensor),
        pass: Pass,
        cache: Option<(&mut KvCache, usize)>,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let h = self.input_layernorm.forward(xs, pass)?;
        let xs = (xs + self.self_attn.forward(&h, rope, pass, cache, mask)?)?;
        let h = self.post_attention_layernorm.forward(&xs, pass)?;
        xs + self.mlp.forward(&h, pass)?
    }

    fn linears_mut(&mut self) -> [&mut Linear; 7] {
        let a = &mut self.self_attn;
        let m = &mut self.mlp;
        [
            &mut a.q_proj,
            &mut a.k_proj,
            &mut a.v_proj,
            &mut a.o_proj,
            &mut m.gate_proj,
            &mut m.up_proj,
            &mut m.down_proj,
        ]
    }
}

/// A decoder-only language model whose weights live in a `VarMap`.
///
/// [`Decoder::forward_train`] uses only differentiable ops; [`Decoder::forward`] uses candle's
/// fused kernels and a caller-owned [`KvCache`]. Both read the same variables, so an optimizer
/// step is visible to the sampler at once.
#[derive(Debug, Clone)]
pub struct Decoder {
    cfg: ModelConfig,
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Linear,
    rope: RotaryTables,
    train_base: bool,
    train_lora: bool,
    train_ops: TrainOps,
    train_memory: TrainMemory,
    device: Device,
}

impl Decoder {
    /// Builds the decoder from `vb` (HF names: `model.embed_tokens.weight`, `model.layers.N...`,
    /// `model.norm.weight`, `lm_head.weight` unless tied).
    pub fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::wrap)?;
        let m = vb.pp("model");
        let embed_tokens = m.get((cfg.vocab_size, cfg.hidden_size), "embed_tokens.weight")?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::new(cfg, m.pp(format!("layers.{i}"))))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, m.pp("norm"))?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear::from_weight("lm_head".into(), embed_tokens.clone())
        } else {
            Linear::new(cfg.hidden_size, cfg.vocab_size, false, vb.pp("lm_head"))?
        };
        let rope = RotaryTables::new(
            cfg.head_dim(),
            cfg.rope_theta,
            cfg.max_position_embeddings,
            vb.dtype(),
            vb.device(),
        )?;
        Ok(Self {
            cfg: cfg.clone(),
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope,
            train_base: true,
            train_lora: false,
            train_ops: TrainOps::default(),
            train_memory: TrainMemory::default(),
            device: vb.device().clone(),
        })
    }

    /// A randomly initialised decoder (seeded) and the `VarMap` holding its weights.
    pub fn random(
        cfg: &ModelConfig,
        seed: u64,
        std: f64,
        device: &Device,
    ) -> Result<(Self, VarMap)> {
        let varmap = VarMap::new();
        let model = Self::new(cfg, VarBuilder::from_varmap(&varmap, DType::F32, device))?;
        super::init::randomize(&varmap, seed, std, |_| true)?;
        Ok((model, varmap))
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// An empty KV cache sized for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.layers.len())
    }

    /// Adds LoRA adapters (variables created in `vb`) to the targeted projections and freezes
    /// the base weights. Returns the number of adapted projections.
    pub fn attach_lora(&mut self, lora: &LoraConfig, vb: &VarBuilder) -> crate::Result<usize> {
        let mut n = 0;
        for layer in &mut self.layers {
            for linear in layer.linears_mut() {
                if lora.targets(linear.name()) {
                    let adapter = lora.adapter(linear, vb)?;
                    linear.set_lora(adapter);
                    n += 1;
                }
            }
        }
        if n == 0 {
            return Err(crate::ModelError::InvalidParameter(format!(
                "no projection matches LoRA targets {:?}",
                lora.target_modules
            )));
        }
        self.train_lora = true;
        self.train_base = false;
        Ok(n)
    }

    /// Every projection, the LM head last.
    fn all_linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers
            .iter_mut()
            .flat_map(|l| l.linears_mut())
            .chain(std::iter::once(&mut self.lm_head))
    }

    /// Records the quantised blocks a GGUF file holds for each projection:
    /// `fetch(name)` gets the HF weight name (`model.layers.0.self_attn.q_proj.weight`; the
    /// tied LM head asks for `model.embed_tokens.weight`) and returns blocks that encode the
    /// weight the model loaded, or `None`. [`Decoder::set_decode_weights`] with
    /// [`DecodeWeights::Gguf`] uses them.
    pub fn set_native_blocks(
        &mut self,
        mut fetch: impl FnMut(&str) -> Option<QuantWeight>,
    ) -> Result<()> {
        let tied = self.cfg.tie_word_embeddings;
        for linear in self.all_linears_mut() {
            let name = if tied && linear.name() == "lm_head" {
                "model.embed_tokens.weight".to_string()
            } else {
                format!("{}.weight", linear.name())
            };
            let blocks = fetch(&name);
            if let Some(b) = &blocks
                && b.dims() != linear.dims()?
            {
                candle_core::bail!(
                    "blocks of {name} are {:?}, the weight is {:?}",
                    b.dims(),
                    linear.dims()?
                );
            }
            linear.set_native(blocks.map(Arc::new));
        }
        Ok(())
    }

    /// Chooses the base weights the inference path reads ([`Decoder::forward`]); the training
    /// path keeps reading f32. Quantised blocks are a copy of the base weights taken now, so
    /// use them only while the base is frozen (LoRA): a step of full fine-tuning does not
    /// reach them. With [`DecodeWeights::Q8_0`] a projection whose input width is not a
    /// multiple of 32 stays f32; with [`DecodeWeights::Gguf`] every projection without GGUF
    /// blocks does. The products with blocks take their inputs as `activations`.
    pub fn set_decode_weights(
        &mut self,
        weights: DecodeWeights,
        activations: DecodeActivations,
    ) -> Result<DecodePath> {
        let mut formats: BTreeMap<String, usize> = BTreeMap::new();
        let mut bytes = 0;
        for linear in self.all_linears_mut() {
            let (_, cols) = linear.dims()?;
            let q8 = |l: &Linear| -> Result<Option<Arc<QuantWeight>>> {
                if cols.is_multiple_of(BlockFormat::VALUES) {
                    QuantWeight::quantize(&l.weight().detach(), BlockFormat::Q8_0)
                        .map(|q| Some(Arc::new(q)))
                } else {
                    Ok(None)
                }
            };
            let q = match weights {
                DecodeWeights::F32 => None,
                DecodeWeights::Q8_0 => q8(linear)?,
                DecodeWeights::Gguf => linear.native().cloned(),
            };
            match &q {
                Some(q) => {
                    *formats.entry(q.format().name().into()).or_default() += 1;
                    bytes += q.bytes();
                }
                None => {
                    *formats.entry("f32".into()).or_default() += 1;
                    bytes += linear.weight().elem_count() * 4;
                }
            }
            linear.set_quant(q, activations);
        }
        Ok(self.decode_path(weights, activations, formats, bytes))
    }

    fn decode_path(
        &self,
        weights: DecodeWeights,
        activations: DecodeActivations,
        formats: BTreeMap<String, usize>,
        weight_bytes: usize,
    ) -> DecodePath {
        let f32_kernel = if super::kernels::decode_matmul::has_avx2_fma() {
            "f32/avx2-fma"
        } else {
            "f32/portable"
        };
        let quant_kernel = super::kernels::decode_quant_matmul::kernel().loop_name(activations);
        let mut kernels = Vec::new();
        if formats.keys().any(|k| k != "f32") {
            kernels.push(quant_kernel);
        }
        if formats.contains_key("f32") {
            kernels.push(f32_kernel.to_string());
        }
        DecodePath {
            weights,
            activations,
            formats,
            weight_bytes,
            kernel: kernels.join("+"),
        }
    }

    /// Chooses how the training path computes attention (default
    /// [`TrainAttention::Blockwise`]); the inference path is unaffected.
    pub fn set_train_attention(&mut self, attention: TrainAttention) {
        for layer in &mut self.layers {
            layer.self_attn.train_attention = attention;
        }
    }

    /// Chooses the training path's RMSNorm, SiLU·up and loss ops (default
    /// [`TrainOps::Fused`]); the inference path is unaffected.
    pub fn set_train_ops(&mut self, ops: TrainOps) {
        self.train_ops = ops;
    }

    /// The training path's ops (see [`Self::set_train_ops`]).
    pub fn train_ops(&self) -> TrainOps {
        self.train_ops
    }

    /// Chooses what the training path keeps for the backward (default
    /// [`TrainMemory::Checkpointed`]); callers that differentiate through
    /// [`Self::hidden_train_checkpointed`] read it with [`Self::train_memory`].
    pub fn set_train_memory(&mut self, memory: TrainMemory) {
        self.train_memory = memory;
    }

    /// What the training path keeps (see [`Self::set_train_memory`]).
    pub fn train_memory(&self) -> TrainMemory {
        self.train_memory
    }

    /// Whether the training path tracks (and so differentiates) the base weights.
    pub fn set_train_base(&mut self, train: bool) {
        self.train_base = train;
    }

    /// A view of the same weights whose training path tracks nothing: for reference-model
    /// log-probabilities, which need the differentiable ops' numerics but no autograd graph.
    pub fn without_grad(&self) -> Self {
        let mut view = self.clone();
        view.train_base = false;
        view.train_lora = false;
        view
    }

    fn train_pass(&self) -> Pass {
        Pass {
            train: true,
            grad_base: self.train_base,
            grad_lora: self.train_lora,
            fused: self.train_ops == TrainOps::Fused,
        }
    }

    fn embed(&self, ids: &Tensor, pass: Pass) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        param(&self.embed_tokens, pass.grad_base)
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, t, self.cfg.hidden_size))
    }

    fn hidden(&self, ids: &Tensor, pass: Pass, mut cache: Option<&mut KvCache>) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let mut xs = self.embed(ids, pass)?;
        let (cos, sin, mask) = match cache.as_deref_mut() {
            None => {
                let (cos, sin) = self.rope.slice(0, t)?;
                (cos, sin, None)
            }
            Some(c) => {
                c.begin(b)?;
                let (cos, sin) = self.rope.at(c.positions(), t)?;
                (cos, sin, c.mask(t, xs.device())?)
            }
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let c = cache.as_deref_mut().map(|c| (c, i));
            xs = layer.forward(&xs, (&cos, &sin), pass, c, mask.as_ref())?;
        }
        if let Some(c) = cache {
            c.advance(t);
        }
        self.norm.forward(&xs, pass)
    }

    /// Training path: final hidden states `(b, t, hidden)` of `ids` `(b, t)` (u32).
    ///
    /// Right padding is safe: with the causal mask, padding never affects earlier positions.
    pub fn hidden_train(&self, ids: &Tensor) -> Result<Tensor> {
        self.hidden(ids, self.train_pass(), None)
    }

    /// Training path with activation checkpointing ([`TrainMemory::Checkpointed`]): the
    /// final hidden states `(b, t, hidden)` of `ids`, whose autograd graph reaches back only to
    /// the last layer's output ([`LayerCheckpoints::output`], a variable), and what
    /// [`Self::backward_layers`] needs to carry the loss's gradient through the layers. The
    /// layers run on the training path's ops without a graph, so the values are the same as
    /// [`Self::hidden_train`]'s. With [`TrainMemory::Saved`] (on the ops it is written for)
    /// each layer keeps what its own backward reads instead of its input only.
    pub fn hidden_train_checkpointed(&self, ids: &Tensor) -> Result<(Tensor, LayerCheckpoints)> {
        let pass = self.train_pass();
        let quiet = Pass {
            grad_base: false,
            grad_lora: false,
            ..pass
        };
        let t = ids.dim(1)?;
        let (cos, sin) = self.rope.slice(0, t)?;
        let mut xs = self.embed(ids, quiet)?;
        let layers = if self.saves_layers() {
            let mut saved = Vec::with_capacity(self.layers.len());
            for layer in &self.layers {
                let (next, s) = layer.forward_saved(&xs, (&cos, &sin))?;
                saved.push(s);
                xs = next;
            }
            Kept::Saved(saved)
        } else {
            let mut inputs = Vec::with_capacity(self.layers.len());
            for layer in &self.layers {
                let next = layer.forward(&xs, (&cos, &sin), quiet, None, None)?;
                inputs.push(xs);
                xs = next;
            }
            Kept::Inputs(inputs)
        };
        let last = Var::from_tensor(&xs)?;
        let hidden = self.norm.forward(last.as_tensor(), pass)?;
        let ck = LayerCheckpoints {
            ids: ids.clone(),
            layers,
            last,
        };
        Ok((hidden, ck))
    }

    /// The backward through the layers after the loss's own: `grad` is the gradient of the
    /// last layer's output (from the loss's [`GradStore`], at [`LayerCheckpoints::output`]).
    /// From the last layer down, each layer is run again from its input with its autograd
    /// graph, and `sum(output * gradient of the output)` is differentiated, which gives the
    /// layer's weights' gradients and its input's, the gradient of the layer below's output;
    /// then the embedding's, when the base weights train. `each` receives every one of these
    /// [`GradStore`]s in turn (a layer's graph and gradients are freed before the next).
    /// With [`TrainMemory::Saved`]'s checkpoints, each layer's own backward runs on what its
    /// forward kept instead (no layer runs again), and `each` receives one store per layer
    /// holding its trainable tensors' gradients, then the embedding's.
    pub fn backward_layers(
        &self,
        ck: LayerCheckpoints,
        grad: Tensor,
        mut each: impl FnMut(&GradStore) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let pass = self.train_pass();
        let t = ck.ids.dim(1)?;
        let (cos, sin) = self.rope.slice(0, t)?;
        let LayerCheckpoints { ids, layers, last } = ck;
        drop(last);
        let mut grad = grad.detach();
        let inputs = match layers {
            Kept::Inputs(inputs) => inputs,
            Kept::Saved(saved) => {
                let Some(grad) = self.backward_saved(saved, grad, (&cos, &sin), &mut each)? else {
                    return Ok(());
                };
                let embedded = self.embed(&ids, pass)?;
                return each(&(embedded * &grad)?.sum_all()?.backward()?);
            }
        };
        for (layer, input) in self.layers.iter().zip(inputs).rev() {
            let x = Var::from_tensor(&input)?;
            drop(input);
            let out = layer.forward(x.as_tensor(), (&cos, &sin), pass, None, None)?;
            let grads = (out * &grad)?.sum_all()?.backward()?;
            each(&grads)?;
            match grads.get(x.as_tensor()) {
                Some(g) => grad = g.detach(),
                // Nothing below this layer is tracked.
                None => return Ok(()),
            }
        }
        if pass.grad_base {
            let embedded = self.embed(&ids, pass)?;
            each(&(embedded * &grad)?.sum_all()?.backward()?)?;
        }
        Ok(())
    }

    /// Whether [`Self::hidden_train_checkpointed`] keeps what each layer's own backward reads
    /// ([`TrainMemory::Saved`] on the ops and attention it is written for).
    fn saves_layers(&self) -> bool {
        self.train_memory == TrainMemory::Saved
            && self.train_ops == TrainOps::Fused
            && self
                .layers
                .iter()
                .all(|l| l.self_attn.train_attention == TrainAttention::Blockwise)
            && self.device.is_cpu()
            && self.embed_tokens.dtype() == DType::F32
    }

    /// [`Self::backward_layers`] through layers with their own backward: hands each layer's
    /// gradients to `each` as a [`GradStore`] and returns the gradient of the first layer's
    /// input when the embedding trains.
    fn backward_saved(
        &self,
        saved: Vec<saved::SavedLayer>,
        grad: Tensor,
        rope: (&Tensor, &Tensor),
        each: &mut impl FnMut(&GradStore) -> crate::Result<()>,
    ) -> crate::Result<Option<Tensor>> {
        let pass = self.train_pass();
        let mut grad = Some(grad);
        for (i, (layer, s)) in self.layers.iter().zip(saved).enumerate().rev() {
            let Some(dy) = grad.take() else {
                break;
            };
            let want = saved::Wanted {
                base: pass.grad_base,
                lora: pass.grad_lora,
                // The first layer's input is the embedding's output.
                dx: i > 0 || pass.grad_base,
            };
            let mut grads = Vec::new();
            grad = layer.backward_saved(s, &dy, rope, want, &mut grads)?;
            drop(dy);
            let mut store = empty_grad_store()?;
            for (var, g) in grads {
                store.insert(&var, g);
            }
            each(&store)?;
        }
        Ok(grad.filter(|_| pass.grad_base))
    }

    /// Training path: logits of hidden states `(..., hidden)` through the LM head.
    pub fn lm_head_train(&self, hidden: &Tensor) -> Result<Tensor> {
        self.lm_head.forward(hidden, self.train_pass())
    }

    /// Training path: logits `(b, t, vocab)` for every position of `ids` `(b, t)`.
    pub fn forward_train(&self, ids: &Tensor) -> Result<Tensor> {
        self.lm_head_train(&self.hidden_train(ids)?)
    }

    /// Inference path: runs `ids` `(b, t)` after what `cache` holds, appends to the cache, and
    /// returns the logits of the last position `(b, vocab)`. Builds no autograd graph. Long
    /// inputs run in chunks of [`PREFILL_CHUNK`] positions, which bounds the attention scores
    /// held at once.
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let t = ids.dim(1)?;
        if t == 0 {
            candle_core::bail!("forward needs at least one position");
        }
        let mut start = 0;
        loop {
            let n = PREFILL_CHUNK.min(t - start);
            let h = self.hidden(&ids.narrow(1, start, n)?, Pass::INFER, Some(cache))?;
            start += n;
            if start == t {
                let last = h.narrow(1, n - 1, 1)?.squeeze(1)?;
                return self.lm_head.forward(&last, Pass::INFER);
            }
        }
    }
}

/// An empty [`GradStore`] (candle builds them only in its backward: this is the backward of a
/// constant, less the constant's own gradient).
fn empty_grad_store() -> Result<GradStore> {
    let one = Tensor::new(1f32, &Device::Cpu)?;
    let mut store = one.backward()?;
    store.remove(&one);
    Ok(store)
}

/// Most positions one inference forward pass attends for at once.
pub const PREFILL_CHUNK: usize = 512;
