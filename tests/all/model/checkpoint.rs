//! Save → load round trips for full weights and LoRA adapters.
use candle_core::{Device, Tensor};
use spade_model::chat::{ChatTemplate, Message};
use spade_model::checkpoint;
use spade_model::load::LoadedModel;
use spade_model::model::{Decoder, LoraConfig, init, lora};

use super::common::{ids, tiny_llama_with_vocab, tiny_tokenizer};

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn logits(m: &Decoder) -> Vec<f32> {
    m.forward_train(&ids(2, 7, m.config().vocab_size, 4))
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn full_save_load_gives_identical_logits_tokenizer_and_template() {
    let cfg = tiny_llama_with_vocab();
    let (model, varmap) = Decoder::random(&cfg, 3, 0.2, &Device::Cpu).unwrap();
    let chat = ChatTemplate::ChatMl {
        default_system: Some("Be brief.\nVery.".into()),
    };
    let loaded = LoadedModel::new(
        cfg.clone(),
        model,
        varmap,
        tiny_tokenizer(),
        chat.clone(),
        cfg.eos_ids(),
    );
    let dir = tmp("full");
    checkpoint::save_full(&dir, &loaded).unwrap();
    let back = checkpoint::load_full(&dir, &Device::Cpu).unwrap();
    assert_eq!(logits(&loaded.model), logits(&back.model));
    assert_eq!(back.config, loaded.config);
    assert_eq!(back.chat, chat);
    assert_eq!(back.eos_ids, loaded.eos_ids);
    let msgs = [Message::new("user", "hi")];
    assert_eq!(
        back.chat.render(&msgs, true),
        "<|im_start|>system\nBe brief.\nVery.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let text = "the winter <|im_end|>";
    let a = loaded.tokenizer.encode(text, false).unwrap();
    let b = back.tokenizer.encode(text, false).unwrap();
    assert_eq!(a.get_ids(), b.get_ids());
}

#[test]
fn lora_save_load_gives_identical_logits() {
    let cfg = tiny_llama_with_vocab();
    let (base, _vm) = Decoder::random(&cfg, 3, 0.2, &Device::Cpu).unwrap();
    let lcfg = LoraConfig {
        r: 2,
        lora_alpha: 4.0,
        target_modules: vec!["q_proj".into(), "down_proj".into()],
    };
    let mut adapted = base.clone();
    let adapters = lora::attach_new(&mut adapted, &lcfg, 8).unwrap();
    assert_eq!(
        logits(&adapted),
        logits(&base),
        "fresh adapters (B = 0) change nothing"
    );
    // Give B nonzero values so the adapters matter.
    init::randomize(&adapters, 9, 0.5, |n| n.contains("lora_A")).unwrap();
    for v in adapters
        .data()
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.contains("lora_B"))
        .map(|(_, v)| v)
    {
        v.set(&Tensor::ones(v.shape(), v.dtype(), &Device::Cpu).unwrap())
            .unwrap();
    }
    assert_eq!(adapters.all_vars().len(), 2 * 2 * cfg.num_hidden_layers);
    let with = logits(&adapted);
    assert_ne!(with, logits(&base));
    let dir = tmp("lora");
    checkpoint::save_lora(&dir, &lcfg, &adapters).unwrap();
    let mut fresh = base.clone();
    let (back_cfg, _back) = checkpoint::load_lora(&dir, &mut fresh).unwrap();
    assert_eq!(back_cfg, lcfg);
    assert_eq!(logits(&fresh), with);
}

#[test]
fn lora_errors_are_clear() {
    let cfg = tiny_llama_with_vocab();
    let (mut base, _vm) = Decoder::random(&cfg, 3, 0.2, &Device::Cpu).unwrap();
    let dir = tmp("nolora");
    let err = checkpoint::load_lora(&dir, &mut base)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "missing file: {}",
            dir.join("adapter_config.json").display()
        )
    );
    let bad = LoraConfig {
        r: 2,
        lora_alpha: 4.0,
        target_modules: vec!["nothing".into()],
    };
    let err = lora::attach_new(&mut base, &bad, 0)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid parameter: no projection matches LoRA targets [\"nothing\"]"
    );
    let zero = LoraConfig {
        r: 0,
        ..LoraConfig::default()
    };
    let err = lora::attach_new(&mut base, &zero, 0)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert_eq!(err, "invalid parameter: LoRA rank must be at least 1");
}

#[test]
fn sharded_hf_directory_loads_and_mismatches_name_the_tensor() {
    let cfg = tiny_llama_with_vocab();
    let (model, varmap) = Decoder::random(&cfg, 3, 0.2, &Device::Cpu).unwrap();
    let chat = ChatTemplate::ChatMl {
        default_system: None,
    };
    let loaded = LoadedModel::new(
        cfg.clone(),
        model,
        varmap,
        tiny_tokenizer(),
        chat,
        cfg.eos_ids(),
    );
    let dir = tmp("sharded");
    checkpoint::save_full(&dir, &loaded).unwrap();
    // Re-save the weights as two shards with an index.
    let all = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let mut names: Vec<&String> = all.keys().collect();
    names.sort();
    let mut map = serde_json::Map::new();
    for (k, chunk) in names.chunks(names.len() / 2 + 1).enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", k + 1);
        let part: std::collections::HashMap<String, Tensor> = chunk
            .iter()
            .map(|n| ((*n).clone(), all[*n].clone()))
            .collect();
        candle_core::safetensors::save(&part, dir.join(&file)).unwrap();
        for n in chunk {
            map.insert((*n).clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let back = checkpoint::load_full(&dir, &Device::Cpu).unwrap();
    assert_eq!(logits(&back.model), logits(&loaded.model));
    // A config that disagrees with the weights names the tensor.
    let mut wrong = cfg.clone();
    wrong.intermediate_size = 48;
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&wrong).unwrap(),
    )
    .unwrap();
    let err = checkpoint::load_full(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "shape mismatch for tensor `model.layers.0.mlp.down_proj.weight`: config expects [32, 48], file has [32, 64]"
    );
    wrong.model_type = "gpt_neox".into();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&wrong).unwrap(),
    )
    .unwrap();
    let err = checkpoint::load_full(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "unsupported architecture `gpt_neox` (supported: llama, qwen2, qwen3)"
    );
    std::fs::remove_file(dir.join("model-00001-of-00002.safetensors")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    let err = checkpoint::load_full(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "missing file: {}",
            dir.join("model-00001-of-00002.safetensors").display()
        )
    );
}
