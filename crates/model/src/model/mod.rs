//! The decoder: configuration, layers, KV cache, LoRA, seeded initialisation, and the
//! quantised base weights the inference path can read.
//!
//! Two paths read the same weights: the training path ([`Decoder::forward_train`]) uses only
//! differentiable ops ([`train_ops`]), the inference path ([`Decoder::forward`]) the CPU
//! kernels in [`kernels`].

pub mod config;
pub mod decode_weights;
pub mod decoder;
pub mod init;
pub mod kernels;
pub mod kv_cache;
pub mod linear;
pub mod lora;
pub mod quant;
pub mod rope;
pub mod train_ops;

pub use config::{Family, ModelConfig};
pub use decode_weights::{DecodeActivations, DecodePath, DecodeWeights};
pub use decoder::{
    Decoder, LayerCheckpoints, PREFILL_CHUNK, TrainAttention, TrainMemory, TrainOps,
};
pub use kv_cache::KvCache;
pub use lora::LoraConfig;

/// Runs `f` on one of rayon's global threads and returns its value.
///
/// A training step is a long run of parallel kernels (gemm, attention, the fused ops, the
/// optimiser) between short serial stretches. Called from a thread outside rayon's pool,
/// each kernel injects its jobs and parks the caller on a lock until a worker finishes, and
/// each park and wake is a futex call and an inter-processor interrupt: about 63,000 futex
/// calls for three full 4x128 updates of SmolLM2-135M. Run on a worker, the caller takes a
/// share of every kernel itself and only the other workers are woken. Called from a rayon
/// thread, `f` runs where it is.
pub(crate) fn on_workers<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    // `join` from outside the pool runs both closures on a worker and blocks this thread
    // once, until they are done.
    rayon::join(f, || ()).0
}

#[cfg(test)]
mod tests {
    use super::on_workers;

    #[test]
    fn on_workers_runs_on_a_pool_thread_and_in_place_when_already_on_one() {
        assert_eq!(rayon::current_thread_index(), None);
        let (outer, inner) = on_workers(|| {
            let outer = rayon::current_thread_index();
            (outer, on_workers(rayon::current_thread_index))
        });
        assert!(outer.is_some());
        assert_eq!(outer, inner);
        assert_eq!(on_workers(|| 6 * 7), 42);
    }
}
