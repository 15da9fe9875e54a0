//! Users' configs load unchanged: every shipped `configs/*.toml` and a run's saved
//! `config.json` (what `Run::create` writes) read back as the settings they were written with.
//! The expected settings in `tests/configs/` were written by `TrainConfig::to_json` before the
//! config was split into settings per part; `SPADE_BLESS=1` rewrites them.
use std::path::{Path, PathBuf};

use spade_selfplay::TrainConfig;

fn fixtures() -> PathBuf {
    crate::common::repo_root().join("tests").join("configs")
}

/// Compares `text` with the fixture `name` (or writes it there under `SPADE_BLESS=1`).
fn matches_fixture(name: &str, text: &str) {
    let path = fixtures().join(name);
    if std::env::var_os("SPADE_BLESS").is_some() {
        std::fs::create_dir_all(fixtures()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (SPADE_BLESS=1 writes it)", path.display()));
    assert_eq!(text, expected, "{name} changed");
}

#[test]
fn every_shipped_config_loads_to_the_settings_it_always_had() {
    let root = crate::common::repo_root();
    let mut names: Vec<String> = std::fs::read_dir(root.join("configs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in names {
        let cfg = TrainConfig::from_file(&root.join("configs").join(&name))
            .unwrap_or_else(|e| panic!("configs/{name}: {e}"));
        let json = name.replace(".toml", ".json");
        matches_fixture(&json, &cfg.to_json());
        if std::env::var_os("SPADE_BLESS").is_none() {
            // The saved form reads back as the same settings.
            assert_eq!(
                TrainConfig::from_file(&fixtures().join(&json)).unwrap(),
                cfg
            );
        }
    }
}

/// A run's `config.json` with a non-default value of every kind of setting: a preset, an
/// `[inference]` section, worked examples, fixed environments and a difficulty controller.
const SAVED_RUN_TOML: &str = r#"
preset = "reference"
seed = 7
rollouts = 12
designer_delay = 2
designer_reward = "blend"
memory_win_low = 0.2
agent_temperature = 0.7
loss_aggregation = "token_mean"
agent_baseline = "zscore"
agent_ema_start = "first_mean"
lr_schedule = "cosine"
decode_weights = "q8_0"
decode_activations = "q8"
kl_coef = 0.01
max_update_samples = 24
fixed_envs = ["rlve:Division", "tests/envs/number_guess/env.py"]
fixed_envs_per_rollout = 1

[[agent_examples]]
user = "What is 2 + 2?"
assistant = "\\boxed{4}"

[difficulty]
tau_num = 4

[inference]
url = "http://127.0.0.1:8000"
model = "base"
concurrency = 8
adapters = "llama-cpp"
llama_presets = "/srv/presets.ini"
adapter_prefix = "mine"
"#;

#[test]
fn a_saved_run_config_loads_unchanged() {
    let written = TrainConfig::parse(SAVED_RUN_TOML, true).unwrap();
    matches_fixture("saved-run.json", &written.to_json());
    matches_fixture("default.json", &TrainConfig::default().to_json());
    if std::env::var_os("SPADE_BLESS").is_some() {
        return;
    }
    for name in ["saved-run.json", "default.json"] {
        let path = fixtures().join(name);
        let cfg = TrainConfig::from_file(&path).unwrap();
        // Every key read back: serialising again gives the file, byte for byte.
        assert_eq!(cfg.to_json(), std::fs::read_to_string(&path).unwrap());
    }
    let saved = TrainConfig::from_file(&fixtures().join("saved-run.json")).unwrap();
    assert_eq!(saved, written);
    assert_eq!(saved.max_agent_update_samples, 24);
    assert_eq!(
        saved.inference.as_ref().unwrap().llama_presets.as_deref(),
        Some(Path::new("/srv/presets.ini"))
    );
}
