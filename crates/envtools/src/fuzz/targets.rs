//! The bodies of the cargo-fuzz targets in `fuzz/` (which are one-line wrappers), kept here so
//! that `cargo test` runs them with fixed inputs and CI covers them.
//!
//! Each body panics when an oracle fails, which is how libFuzzer learns of a finding.

use std::time::Duration;

use spade_sandbox::Runtime;
use spade_sandbox::SandboxOptions;
use spade_sandbox::{CallError, ErrorKind};
use spade_sandbox::{Config, Limits};

use crate::actions::{ActionGen, Style, parse_tools};
use crate::episode::check_replay;
use crate::episode::{Episode, Record};
use crate::oracles::check_step;
use crate::rng::Rng;
use crate::trajectory::Trajectory;

/// A sandbox runtime and an async executor, built once per fuzzing process.
pub struct Harness {
    runtime: Runtime,
    executor: tokio::runtime::Runtime,
}

/// Small limits, so that every input finishes in well under a second.
pub fn fuzz_limits() -> Limits {
    Limits {
        fuel_per_call: 200_000_000,
        load_fuel: 4_000_000_000,
        memory_limit: 128 << 20,
        call_deadline: Duration::from_secs(10),
        output_limit: 64 << 10,
        ..Limits::default()
    }
}

const CANARY_ENV: &str = "class CanaryEnv:\n    def reset(self, seed=None):\n        return 'alive', {}\n    def step(self, action):\n        return action[:10], 0.5, True, False, {}\n";

impl Harness {
    /// A harness with its own runtime under [`fuzz_limits`].
    pub fn new() -> Harness {
        let config = Config {
            limits: fuzz_limits(),
            ..Config::default()
        };
        Harness::with_runtime(&Runtime::new(config).expect("the sandbox runtime starts"))
    }

    /// A harness around an existing runtime (its limits are replaced by [`fuzz_limits`]).
    pub fn with_runtime(runtime: &Runtime) -> Harness {
        Harness {
            runtime: runtime.with_limits(fuzz_limits()),
            executor: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("an async executor"),
        }
    }

    /// Target `python_source`: arbitrary bytes as an environment's source. Every call must end
    /// in a typed result or error, a killed sandbox must stay dead, and a fresh sandbox must
    /// work afterwards.
    pub fn python_source(&self, data: &[u8]) {
        let source = String::from_utf8_lossy(data);
        self.executor.block_on(async {
            let options = SandboxOptions::seeded(0);
            let mut episode = Episode::start(&self.runtime, &*source, options, Record::Off)
                .await
                .expect("an unrecorded episode writes nothing");
            if episode.info().is_ok() {
                let mut killed: Option<ErrorKind> = None;
                let results = [
                    episode.reset(Some(0)).await.sandboxed().map(drop),
                    episode.step("\\boxed{1}").await.sandboxed().map(drop),
                    episode.solution().await.sandboxed().map(drop),
                ];
                for result in results {
                    match (result, killed) {
                        (Err(CallError::Dead(kind)), Some(k)) => assert_eq!(kind, k),
                        (other, Some(k)) => panic!("a sandbox killed by {k} answered {other:?}"),
                        (Err(err), None) if err.kills_sandbox() => killed = Some(err.kind()),
                        (Err(CallError::Dead(kind)), None) => {
                            panic!("dead ({kind}) without a killing error")
                        }
                        _ => {}
                    }
                }
            }
            let mut fresh = Episode::start(&self.runtime, CANARY_ENV, options, Record::Off)
                .await
                .expect("an unrecorded episode writes nothing");
            assert!(
                fresh.info().is_ok(),
                "a fresh sandbox loads after any input"
            );
            let reset = fresh.reset(None).await.sandboxed().expect("and resets");
            assert_eq!(reset.observation, "alive");
        });
    }

    /// Target `actions`: arbitrary action sequences against a good environment `source`. The
    /// first 8 bytes seed a generator; the rest, split at newlines, are literal actions (the
    /// generator fills in when there are none). A good environment must answer every action
    /// with a well-typed step (no contract error, no trap), within the reward bounds, and the
    /// episode must replay to the same trace hash.
    pub fn actions(&self, source: &str, data: &[u8]) {
        let (seed_bytes, rest) = data.split_at(data.len().min(8));
        let mut seed = [0u8; 8];
        seed[..seed_bytes.len()].copy_from_slice(seed_bytes);
        let seed = u64::from_le_bytes(seed);
        self.executor.block_on(async {
            let mut recording =
                Episode::probe(&self.runtime, source, seed & 0xffff, "fuzz-target", None).await;
            let info = recording.info().expect("the fixture loads").clone();
            let mut generator = ActionGen::new(seed, parse_tools(info.tools.as_deref()));
            let literal: Vec<String> = rest
                .split(|&b| b == b'\n')
                .filter(|_| !rest.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let mut observation = recording
                .reset(Some(seed & 0xffff))
                .await
                .sandboxed()
                .expect("reset")
                .observation;
            let mut rng = Rng::new(seed);
            let count = if literal.is_empty() {
                8
            } else {
                literal.len().min(64)
            };
            for i in 0..count {
                let action = match literal.get(i) {
                    Some(a) if !rng.chance(0.2) => a.clone(),
                    _ => generator.next(&observation, Style::Any),
                };
                match recording.step(&action).await.sandboxed() {
                    Ok(step) => {
                        assert_eq!(check_step(&step), None, "action {action:?}");
                        observation = step.observation;
                        if step.terminated || step.truncated {
                            break;
                        }
                    }
                    Err(err) => {
                        assert!(
                            !matches!(
                                err.kind(),
                                ErrorKind::Contract
                                    | ErrorKind::GuestTrap
                                    | ErrorKind::Dead
                                    | ErrorKind::Usage
                            ),
                            "action {action:?}: {err}"
                        );
                        if err.kills_sandbox() {
                            break;
                        }
                    }
                }
            }
            let (text, hash) = recording.finish_probe();
            if let Some(v) = check_replay(&self.runtime, &text, &hash).await {
                panic!("{}: {}", v.code, v.message);
            }
        });
    }
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

/// Target `trajectory_parser`: arbitrary bytes as a trajectory file (read under a 1 MiB cap).
/// Reading and the tamper check must return a result or a typed error, never panic.
pub fn trajectory_parser(data: &[u8]) {
    if let Ok(trajectory) = Trajectory::read(data, 1 << 20) {
        let _ = trajectory.verify();
    }
}

/// The fuzz targets keep a harness in a `static`.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Harness>();
};
