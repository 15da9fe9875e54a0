//! spade's LoRA adapters are PEFT adapters: a tiny model and a random adapter saved by spade
//! load in Hugging Face transformers and peft (in the test venv) and give the same logits as
//! spade's decoder (python/tests/peft_logits.py).

use candle_core::{Device, IndexOp, Tensor};
use spade_model::checkpoint;
use spade_model::model::LoraConfig;
use spade_model::model::lora;

use crate::common::tiny_chat_model;
use crate::serve::harness::run_python;

#[test]
fn adapters_load_in_peft_with_the_same_logits() {
    let dir = std::env::temp_dir().join(format!("spade-peft-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut loaded = tiny_chat_model(3, None);
    checkpoint::save_full(&dir.join("base"), &loaded).unwrap();
    let ids: Vec<u32> = vec![5, 17, 42, 9, 77, 3, 28, 64];
    let x = Tensor::new(ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let base = loaded.model.forward_train(&x).unwrap().i((0, 7)).unwrap();

    // Every projection adapted, with B random too, so that the adapter moves the logits.
    let cfg = LoraConfig::default();
    let adapters = lora::attach_new(&mut loaded.model, &cfg, 5).unwrap();
    for (name, var) in adapters.data().lock().unwrap().iter() {
        if name.contains("lora_B") {
            // `attach_new` (and `init::randomize`) leave B at zero: a deterministic pattern.
            let n = var.elem_count();
            let values: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 0.3).collect();
            var.set(&Tensor::from_vec(values, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    checkpoint::save_lora(&dir.join("adapter"), &cfg, &adapters).unwrap();
    let adapted = loaded.model.forward_train(&x).unwrap().i((0, 7)).unwrap();
    let ids_path = dir.join("ids.json");
    std::fs::write(&ids_path, serde_json::to_string(&ids).unwrap()).unwrap();

    let out = run_python(
        "tests/peft_logits.py",
        &[
            dir.join("base").to_str().unwrap(),
            dir.join("adapter").to_str().unwrap(),
            ids_path.to_str().unwrap(),
        ],
    );
    let theirs: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let last = |key: &str| -> Vec<f32> {
        let rows = theirs[key].as_array().unwrap();
        rows.last()
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect()
    };
    let max_diff = |a: &Tensor, b: &[f32]| -> f32 {
        a.to_vec1::<f32>()
            .unwrap()
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    };
    let (their_base, their_adapted) = (last("base"), last("adapted"));
    let base_diff = max_diff(&base, &their_base);
    let adapted_diff = max_diff(&adapted, &their_adapted);
    let moved = max_diff(&adapted, &their_base);
    eprintln!("base {base_diff}, adapted {adapted_diff}, the adapter moves the logits by {moved}");
    assert!(
        base_diff < 1e-4,
        "the base model differs under transformers by {base_diff}"
    );
    assert!(
        moved > 1e-2,
        "the adapter must move the logits (by {moved})"
    );
    assert!(
        adapted_diff < 1e-4,
        "the adapter under peft differs from spade's by {adapted_diff} (it moves them by {moved})"
    );
    // spade reads the adapter back from the PEFT files.
    let mut again = tiny_chat_model(3, None);
    checkpoint::load_lora(&dir.join("adapter"), &mut again.model).unwrap();
    let reloaded = again.model.forward_train(&x).unwrap().i((0, 7)).unwrap();
    let d = max_diff(&reloaded, &adapted.to_vec1::<f32>().unwrap());
    assert_eq!(d, 0.0);
}
