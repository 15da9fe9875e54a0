//! Load plans and snapshots cached on disk, so that a new process starts its first sandbox of
//! a known source from the snapshot instead of probing the source again.
//!
//! One file per source, `max_turns`, limits and snapshot setting, under the artifact cache
//! directory, named by a hash of those and of the compiled guest's key: a different guest,
//! engine or spade build never reads another's file. A file is a JSON header line (the plan,
//! the snapshot's figures, the CRC-32 of its pages, which catches a damaged file at a tenth
//! of a sha256's cost) followed by the pages. Files are written
//! private to the user (0600, via a temporary name and a rename) and only read when no one else
//! can write them; a file that is missing, damaged or not private is ignored and the source is
//! probed as if there were no cache.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::artifact::private;
use crate::sandbox::EnvInfo;
use crate::snapshot::{LoadPlan, Snapshot};
use crate::source::PlanKey;

/// Bumped whenever the file format or what a plan means changes.
const FORMAT: &str = "spade-snapshot-2";

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    /// `None`: the module draws randomness (seeded plan).
    deferred: Option<Deferred>,
}

#[derive(Serialize, Deserialize)]
struct Deferred {
    seed_before_construct: bool,
    snapshot: Option<Figures>,
}

#[derive(Serialize, Deserialize)]
struct Figures {
    wasm_pages: u32,
    dirty_pages: usize,
    load_fuel: u64,
    clock_nanos: u64,
    constructed: Option<Info>,
    chunk_lens: Vec<usize>,
    crc32: u32,
}

#[derive(Serialize, Deserialize)]
struct Info {
    class_name: String,
    max_turns: Option<u32>,
    tools: Option<String>,
}

/// Where the plan for `source_sha256` and `key` is cached under `dir`.
pub(crate) fn path(dir: &Path, artifact_key: &str, source_sha256: &str, key: &PlanKey) -> PathBuf {
    let mut hash = Sha256::new();
    for part in [
        FORMAT,
        artifact_key,
        source_sha256,
        &format!("{:?}", key.max_turns),
        &format!("{:?}", key.limits),
        if key.snapshots {
            "snapshots"
        } else {
            "no snapshots"
        },
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let name = hex::encode(hash.finalize());
    dir.join("snapshots").join(format!("{}.snap", &name[..32]))
}

/// The cached plan at `path`, if there is a readable, intact, private one.
pub(crate) fn read(path: &Path) -> Option<LoadPlan> {
    if private::check(path).is_err() {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    if header.format != FORMAT {
        return None;
    }
    let Some(deferred) = header.deferred else {
        return Some(LoadPlan::Seeded);
    };
    let snapshot = match deferred.snapshot {
        None => None,
        Some(figures) => {
            let data = &bytes[newline + 1..];
            if crc32fast::hash(data) != figures.crc32
                || figures.chunk_lens.iter().sum::<usize>() != data.len()
            {
                return None;
            }
            let mut chunks = Vec::with_capacity(figures.chunk_lens.len());
            let mut at = 0;
            for len in figures.chunk_lens {
                chunks.push(Arc::from(&data[at..at + len]));
                at += len;
            }
            Some(Arc::new(Snapshot {
                wasm_pages: figures.wasm_pages,
                chunks,
                dirty_pages: figures.dirty_pages,
                constructed: figures.constructed.map(|info| EnvInfo {
                    class_name: info.class_name,
                    max_turns: info.max_turns,
                    tools: info.tools,
                }),
                load_fuel: figures.load_fuel,
                clock_nanos: figures.clock_nanos,
            }))
        }
    };
    Some(LoadPlan::Deferred {
        seed_before_construct: deferred.seed_before_construct,
        snapshot,
    })
}

/// Writes `plan` to `path` (atomically, private to the user).
pub(crate) fn write(path: &Path, plan: &LoadPlan) -> std::io::Result<()> {
    let (deferred, data) = match plan {
        LoadPlan::Seeded => (None, Vec::new()),
        LoadPlan::Deferred {
            seed_before_construct,
            snapshot,
        } => {
            let data: Vec<u8> = snapshot
                .iter()
                .flat_map(|s| s.chunks.iter().flat_map(|chunk| chunk.iter().copied()))
                .collect();
            let figures = snapshot.as_ref().map(|s| Figures {
                wasm_pages: s.wasm_pages,
                dirty_pages: s.dirty_pages,
                load_fuel: s.load_fuel,
                clock_nanos: s.clock_nanos,
                constructed: s.constructed.as_ref().map(|info| Info {
                    class_name: info.class_name.clone(),
                    max_turns: info.max_turns,
                    tools: info.tools.clone(),
                }),
                chunk_lens: s.chunks.iter().map(|chunk| chunk.len()).collect(),
                crc32: crc32fast::hash(&data),
            });
            (
                Some(Deferred {
                    seed_before_construct: *seed_before_construct,
                    snapshot: figures,
                }),
                data,
            )
        }
    };
    let header = Header {
        format: FORMAT.to_owned(),
        deferred,
    };
    let mut head = serde_json::to_vec(&header)?;
    head.push(b'\n');
    private::write_atomic(path, &[&head, &data])
}
