//! The designer's warm start: `spade sft` on a tiny random model (the loss falls, a resumed run
//! ends with the uninterrupted run's weights, the library is checked and split) and
//! `spade train --init-adapter` (exactly the adapter's weights; clear errors).
use std::path::{Path, PathBuf};

use candle_core::Device;
use spade_model::checkpoint;
use spade_model::load::LoadedModel;
use spade_model::model::{Decoder, LoraConfig};
use spade_selfplay::corpus::Corpus;
use spade_selfplay::library::{self, CheckedEnv, DesignPair, LibraryEnv};
use spade_selfplay::prompts::Variant;
use spade_selfplay::sft::{SftRun, SftSettings};
use spade_selfplay::{CandlePolicy, extract};

use crate::common::{spade, stderr, stdout};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-sft-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn tiny(seed: u64) -> LoadedModel {
    crate::common::tiny_chat_model(seed, Some(1024))
}

/// Three short environments' pairs, with the designer's real prompt (cut in its middle to the
/// tiny model's context, as sampling cuts it).
fn pairs() -> Vec<DesignPair> {
    let envs: Vec<CheckedEnv> = [
        (
            "add_env",
            "class AddEnv:\n    def solution(self):\n        return '3'\n",
        ),
        (
            "sub_env",
            "class SubEnv:\n    def solution(self):\n        return '1'\n",
        ),
        (
            "mul_env",
            "class MulEnv:\n    def solution(self):\n        return '6'\n",
        ),
    ]
    .iter()
    .map(|(n, s)| CheckedEnv {
        env: LibraryEnv {
            name: (*n).into(),
            source: library::normalise_source(s),
            skill: None,
            origin: "test".into(),
        },
        variant: Variant::SingleAnswer,
    })
    .collect();
    let corpus = Corpus::parse("{\"text\": \"Sums and products.\"}", 40).unwrap();
    let pairs = library::design_pairs(&envs, &corpus, 0);
    for (p, e) in pairs.iter().zip(&envs) {
        assert_eq!(extract::python_block(&p.completion).unwrap(), e.env.source);
    }
    pairs
}

fn settings() -> SftSettings {
    SftSettings {
        epochs: 3,
        lr: 1e-2,
        batch_size: 2,
        micro_batch: 1,
        checkpoint_every: 2,
        ..SftSettings::default()
    }
}

/// Every adapter tensor of `policy` as bits, by name.
fn adapter_bits(policy: &CandlePolicy) -> Vec<(String, Vec<u32>)> {
    let (_, vm) = policy.lora().unwrap();
    let data = vm.data().lock().unwrap();
    let mut out: Vec<(String, Vec<u32>)> = data
        .iter()
        .map(|(n, v)| {
            let bits = v
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            (n.clone(), bits)
        })
        .collect();
    out.sort();
    out
}

fn run_to_end(run: &mut SftRun<'_>) {
    while run.step().unwrap().is_some() {}
}

#[test]
fn sft_lowers_the_loss_on_its_pairs_and_logs_every_step() {
    let dir = tmp("lowers");
    let s = settings();
    let mut policy = CandlePolicy::new(tiny(1), &s.policy()).unwrap();
    let mut run = SftRun::create(&dir, s, pairs(), &mut policy).unwrap();
    // ceil(3 / 2) = 2 steps per epoch, 3 epochs.
    assert_eq!(run.total_steps(), 6);
    let before = run.loss().unwrap();
    run_to_end(&mut run);
    let after = run.loss().unwrap();
    assert!(after < before * 0.9, "loss {before} -> {after}");
    let out = run.finish().unwrap();
    assert!(out.join("adapter_model.safetensors").is_file());
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[5]["step"], 6);
    assert_eq!(lines[5]["epoch"], 2);
    // Every epoch trains each pair once.
    for epoch in 0..3 {
        let mut names: Vec<String> = lines
            .iter()
            .filter(|l| l["epoch"] == epoch)
            .flat_map(|l| l["pairs"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["add_env", "mul_env", "sub_env"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_run_ends_with_the_uninterrupted_runs_weights() {
    let s = settings();
    let whole = tmp("whole");
    let mut p1 = CandlePolicy::new(tiny(1), &s.policy()).unwrap();
    let mut run = SftRun::create(&whole, s.clone(), pairs(), &mut p1).unwrap();
    run_to_end(&mut run);
    drop(run);

    let cut = tmp("cut");
    let mut p2 = CandlePolicy::new(tiny(1), &s.policy()).unwrap();
    let mut run = SftRun::create(&cut, s.clone(), pairs(), &mut p2).unwrap();
    // Killed after step 3: the checkpoint of step 2 is the last one.
    for _ in 0..3 {
        run.step().unwrap().unwrap();
    }
    drop(run);
    let mut p3 = CandlePolicy::new(tiny(1), &s.policy()).unwrap();
    let mut run = SftRun::resume(&cut, &mut p3).unwrap();
    assert_eq!(run.state.step, 2);
    assert_eq!(
        std::fs::read_to_string(cut.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    run_to_end(&mut run);
    drop(run);
    assert_eq!(adapter_bits(&p3), adapter_bits(&p1));
    assert_ne!(adapter_bits(&p3), adapter_bits(&p2), "p2 stopped early");
    assert_eq!(
        std::fs::read_to_string(cut.join("metrics.jsonl")).unwrap(),
        std::fs::read_to_string(whole.join("metrics.jsonl")).unwrap()
    );
    for d in [whole, cut] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The adapter `spade sft` wrote, after a short run.
fn trained_adapter(name: &str) -> PathBuf {
    let dir = tmp(name);
    let s = SftSettings {
        epochs: 1,
        ..settings()
    };
    let mut policy = CandlePolicy::new(tiny(1), &s.policy()).unwrap();
    let mut run = SftRun::create(&dir, s, pairs(), &mut policy).unwrap();
    run_to_end(&mut run);
    run.finish().unwrap()
}

#[test]
fn init_adapter_starts_from_exactly_the_saved_weights() {
    let adapter = trained_adapter("init");
    let saved =
        candle_core::safetensors::load(adapter.join("adapter_model.safetensors"), &Device::Cpu)
            .unwrap();
    // Another seed: fresh adapters differ from the saved ones until the warm start.
    let cfg = SftSettings {
        seed: 99,
        ..settings()
    }
    .policy();
    let mut policy = CandlePolicy::new(tiny(1), &cfg).unwrap();
    let fresh = adapter_bits(&policy);
    policy.init_adapter(&adapter).unwrap();
    let now = adapter_bits(&policy);
    assert_ne!(fresh, now);
    assert_eq!(now.len(), saved.len());
    for (name, bits) in &now {
        let t = &saved[&format!("{}{name}", checkpoint::PEFT_PREFIX)];
        let expected: Vec<u32> = t
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(bits, &expected, "{name}");
    }
    let _ = std::fs::remove_dir_all(adapter.parent().unwrap());
}

/// A tiny model like [`tiny`] but with three layers: an adapter for [`tiny`] does not fit it.
fn three_layers() -> LoadedModel {
    let base = tiny(1);
    let mut cfg = base.config.clone();
    cfg.num_hidden_layers = 3;
    let (model, varmap) = Decoder::random(&cfg, 1, 0.2, &Device::Cpu).unwrap();
    LoadedModel::new(
        cfg.clone(),
        model,
        varmap,
        base.tokenizer.clone(),
        base.chat.clone(),
        cfg.eos_ids(),
    )
}

fn init_error(model: LoadedModel, lora: Option<LoraConfig>, dir: &Path) -> String {
    let cfg = SftSettings { lora, ..settings() }.policy();
    let mut policy = CandlePolicy::new(model, &cfg).unwrap();
    policy.init_adapter(dir).unwrap_err().to_string()
}

#[test]
fn init_adapter_errors_say_what_is_wrong() {
    let adapter = trained_adapter("errors");
    let default = SftSettings::default().lora;
    let missing = adapter.with_file_name("nope");
    assert_eq!(
        init_error(tiny(1), default.clone(), &missing),
        format!(
            "--init-adapter: {} is not an adapter directory: the directory is missing (an adapter is adapter_config.json + adapter_model.safetensors, as `spade sft` and `spade train` checkpoints write them)",
            missing.display()
        )
    );
    let half = tmp("half");
    std::fs::create_dir_all(&half).unwrap();
    std::fs::copy(
        adapter.join("adapter_config.json"),
        half.join("adapter_config.json"),
    )
    .unwrap();
    assert!(
        init_error(tiny(1), default.clone(), &half).ends_with(
            "is not an adapter directory: adapter_model.safetensors is missing (an adapter is adapter_config.json + adapter_model.safetensors, as `spade sft` and `spade train` checkpoints write them)"
        )
    );
    let rank4 = LoraConfig {
        r: 4,
        ..default.clone().unwrap()
    };
    assert_eq!(
        init_error(tiny(1), Some(rank4), &adapter),
        format!(
            "--init-adapter: the adapter in {} has LoRA rank 8 (alpha 16, modules q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj), but this run trains rank 4 (alpha 16, modules q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj): set lora_rank / lora_alpha to match",
            adapter.display()
        )
    );
    assert_eq!(
        init_error(three_layers(), default, &adapter),
        format!(
            "--init-adapter: the adapter in {} was made for another model: it has no tensor `model.layers.2.mlp.down_proj.lora_A.weight`",
            adapter.display()
        )
    );
    assert_eq!(
        init_error(tiny(1), None, &adapter),
        format!(
            "invalid parameter: --init-adapter {}: this run trains every weight (lora = false), so it has no adapters to start from; train with LoRA, or pass a full model with --model",
            adapter.display()
        )
    );
    let _ = std::fs::remove_dir_all(adapter.parent().unwrap());
    let _ = std::fs::remove_dir_all(half);
}

#[test]
fn spade_sft_checks_the_library_holds_out_a_fifth_and_writes_an_adapter() {
    let root = tmp("cli");
    let model = root.join("model");
    checkpoint::save_full(&model, &crate::common::tiny_chat_model(1, Some(4096))).unwrap();
    let broken = root.join("broken");
    std::fs::create_dir_all(broken.join("no_class")).unwrap();
    std::fs::write(broken.join("no_class/env.py"), "x = 1\n").unwrap();
    let corpus = root.join("corpus.jsonl");
    std::fs::write(&corpus, "{\"text\": \"Digits add up.\"}\n").unwrap();
    let out = root.join("run");
    let args = [
        "sft",
        "--corpus",
        corpus.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--no-starter-envs",
        "--library",
        "eval_envs",
        "--library",
        broken.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--epochs",
        "1",
        "--batch-size",
        "3",
    ];
    let o = spade(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    // Four eval environments pass, the broken one does not; round(4 / 5) = 1 is held out.
    assert!(
        stdout(&o).contains(
            "spade sft: library of 5: 1 rejected, 1 held out, 0 skipped as too long, 3 pairs to train"
        ),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("spade sft: rejected no_class ("),
        "{}",
        stderr(&o)
    );
    let held = std::fs::read_to_string(out.join("held_out.txt")).unwrap();
    assert_eq!(held.lines().count(), 1);
    let lib: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("library.json")).unwrap()).unwrap();
    assert_eq!(lib["rejected"][0]["name"], "no_class");
    assert!(!lib["rejected"][0]["codes"].as_array().unwrap().is_empty());
    assert!(
        !lib["trained"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str() == held.lines().next())
    );
    assert!(out.join("adapter/adapter_model.safetensors").is_file());
    assert_eq!(
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .count(),
        1
    );
    // A budget of 1.0261 GiB (1,101,766,485 bytes) holds (1,101,766,485 - 1,073,956,864) /
    // 9,296 = 2,991 tokens of the tiny model's step (26,880 parameters x 8 bytes + 1 GiB
    // before the first token, 9,296 bytes a token with saved layers, the default:
    // tests/all/model_cli.rs works them out). The three pairs are 2,717, 3,056 and 3,192
    // tokens long: two are skipped.
    let small = root.join("small");
    let mut small_args = args.to_vec();
    let at = small_args.len() - 5;
    small_args[at] = small.to_str().unwrap();
    small_args.extend(["--train-memory-gib", "1.0261"]);
    let o = spade(&small_args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(
            "spade sft: library of 5: 1 rejected, 1 held out, 2 skipped as too long, 1 pairs to train"
        ),
        "{}",
        stdout(&o)
    );
    for skipped in [
        "spade sft: skipped cheapest_supplier: 3192 tokens with its prompt, more than the 2991 a step holds in train_memory_gib",
        "spade sft: skipped number_guess: 3056 tokens with its prompt, more than the 2991 a step holds in train_memory_gib",
    ] {
        assert!(stderr(&o).contains(skipped), "{}", stderr(&o));
    }
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(small.join("sft.json")).unwrap()).unwrap();
    assert_eq!(
        (&saved["train_memory_gib"], &saved["micro_batch_tokens"]),
        (&serde_json::json!(1.0261), &serde_json::json!(2991))
    );
    // A second run into the same directory is refused; --init-adapter names a missing dir.
    let o = spade(&args);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("already holds a run: pass --resume"),
        "{}",
        stderr(&o)
    );
    let nope = root.join("nope");
    let o = spade(&[
        "train",
        "--model",
        model.to_str().unwrap(),
        "--out",
        root.join("train").to_str().unwrap(),
        "--init-adapter",
        nope.to_str().unwrap(),
        "--rollouts",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!(
            "--init-adapter: {} is not an adapter directory: the directory is missing",
            nope.display()
        )),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(root);
}

/// The warm-start library (`library_envs/`): 103 environments, each accepted by
/// `spade check` at its default five seeds (stricter than self-play's one) with no warning,
/// a solution that wins when played, one of the nine skills, and at most 2,400 characters, so
/// that a design learnt from it fits the default 1,024-token design budget. Every kind of
/// design prompt has examples.
#[tokio::test]
async fn every_library_env_passes_check_without_a_warning_and_is_short() {
    let dir = crate::common::repo_root().join("library_envs");
    let envs = library::read_dir(&dir).unwrap();
    assert_eq!(envs.len(), 103);
    let runtime = crate::common::runtime();
    let opts = spade_envtools::check::CheckOptions::default();
    assert!(opts.require_winning_solution);
    let mut variants = Vec::new();
    for env in &envs {
        assert!(
            env.source.len() <= 2_400,
            "{}: {} chars",
            env.name,
            env.source.len()
        );
        let skill = env.skill.as_deref().unwrap_or_default();
        assert!(
            spade_selfplay::prompts::SKILLS.contains(&skill),
            "{}: skill {skill:?}",
            env.name
        );
        let report = spade_envtools::check::check(&runtime, &env.source, &opts).await;
        assert!(report.accepted, "{}: {:?}", env.name, report.codes());
        assert_eq!(report.warnings(), 0, "{}: {:?}", env.name, report.codes());
        variants.push(library::variant_of(report.tool_use, report.max_turns));
    }
    let count = |v: Variant| variants.iter().filter(|&&x| x == v).count();
    assert_eq!(count(Variant::ToolUse), 14);
    assert_eq!(count(Variant::MultiTurn), 30);
    assert_eq!(count(Variant::SingleAnswer), 59);
}
