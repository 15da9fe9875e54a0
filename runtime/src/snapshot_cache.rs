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

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::artifact::private;
use crate::sandbox::EnvInfo;
use crate::snapshot::{LoadPlan, MAX_SNAPSHOT_BYTES, PAGE, RECORD, Snapshot};
use crate::source::PlanKey;

/// Bumped whenever the file format or what a plan means changes.
const FORMAT: &str = "spade-snapshot-3";

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
    later_pages: Vec<u32>,
    load_fuel: u64,
    clock_nanos: u64,
    constructed: Option<Info>,
    records_len: usize,
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
///
/// The pages are read straight into the buffer every restore writes from (no copy of the
/// whole file first): in a process that starts for one episode, that copy was a fifth of the
/// host memory it touched.
pub(crate) fn read(path: &Path) -> Option<LoadPlan> {
    if private::check(path).is_err() {
        return None;
    }
    let mut file = BufReader::new(std::fs::File::open(path).ok()?);
    let mut line = Vec::new();
    file.read_until(b'\n', &mut line).ok()?;
    if line.pop() != Some(b'\n') {
        return None;
    }
    let header: Header = serde_json::from_slice(&line).ok()?;
    if header.format != FORMAT {
        return None;
    }
    let Some(deferred) = header.deferred else {
        return Some(LoadPlan::Seeded);
    };
    let snapshot = match deferred.snapshot {
        None => None,
        Some(figures) => {
            // A damaged length must not allocate more than a snapshot can hold.
            if figures.records_len > MAX_SNAPSHOT_BYTES / PAGE * RECORD {
                return None;
            }
            let mut records = vec![0; figures.records_len];
            file.read_exact(&mut records).ok()?;
            // A file longer than its records is damaged too.
            if crc32fast::hash(&records) != figures.crc32 || file.read(&mut [0]).ok()? != 0 {
                return None;
            }
            Some(Arc::new(Snapshot {
                wasm_pages: figures.wasm_pages,
                records,
                dirty_pages: figures.dirty_pages,
                later_pages: figures.later_pages,
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
        LoadPlan::Seeded => (None, &[][..]),
        LoadPlan::Deferred {
            seed_before_construct,
            snapshot,
        } => {
            let data: &[u8] = snapshot.as_ref().map_or(&[], |s| &s.records);
            let figures = snapshot.as_ref().map(|s| Figures {
                wasm_pages: s.wasm_pages,
                dirty_pages: s.dirty_pages,
                later_pages: s.later_pages.clone(),
                load_fuel: s.load_fuel,
                clock_nanos: s.clock_nanos,
                constructed: s.constructed.as_ref().map(|info| Info {
                    class_name: info.class_name.clone(),
                    max_turns: info.max_turns,
                    tools: info.tools.clone(),
                }),
                records_len: s.records.len(),
                crc32: crc32fast::hash(data),
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
    private::write_atomic(path, &[&head, data])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot of four pages' records, with a constructed environment.
    fn plan() -> LoadPlan {
        LoadPlan::Deferred {
            seed_before_construct: false,
            snapshot: Some(Arc::new(Snapshot {
                wasm_pages: 7,
                records: (0..4 * RECORD).map(|i| (i % 251) as u8).collect(),
                dirty_pages: 4,
                later_pages: vec![9, 11],
                constructed: Some(EnvInfo {
                    class_name: "CachedEnv".to_owned(),
                    max_turns: Some(9),
                    tools: None,
                }),
                load_fuel: 123_456,
                clock_nanos: 42,
            })),
        }
    }

    fn records(plan: &LoadPlan) -> &[u8] {
        match plan {
            LoadPlan::Deferred {
                snapshot: Some(s), ..
            } => &s.records,
            _ => panic!("a plan with a snapshot, got {plan:?}"),
        }
    }

    #[test]
    fn a_written_plan_reads_back_and_a_damaged_file_is_ignored() {
        let dir = std::env::temp_dir().join(format!("spade-snapcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        private::create_dir(&dir).unwrap();
        let path = dir.join("plan.snap");
        let written = plan();
        write(&path, &written).unwrap();

        let read_back = read(&path).expect("an intact file is read");
        assert_eq!(records(&read_back), records(&written));
        let LoadPlan::Deferred {
            seed_before_construct,
            snapshot: Some(snapshot),
        } = &read_back
        else {
            unreachable!("checked by `records`");
        };
        assert!(!seed_before_construct);
        assert_eq!(
            (
                snapshot.wasm_pages,
                snapshot.dirty_pages,
                snapshot.load_fuel
            ),
            (7, 4, 123_456)
        );
        assert_eq!(snapshot.clock_nanos, 42);
        assert_eq!(snapshot.later_pages, [9, 11]);
        let info = snapshot.constructed.as_ref().unwrap();
        assert_eq!(
            (info.class_name.as_str(), info.max_turns),
            ("CachedEnv", Some(9))
        );

        let intact = std::fs::read(&path).unwrap();
        let mut flipped = intact.clone();
        let middle = intact.len() - 2 * 4100;
        flipped[middle] ^= 1;
        let mut longer = intact.clone();
        longer.push(0);
        let cases: [(&str, &[u8]); 4] = [
            ("a flipped page byte", &flipped),
            ("a missing last byte", &intact[..intact.len() - 1]),
            ("a byte past the last record", &longer),
            (
                "no pages after the header",
                &intact[..=intact.iter().position(|&b| b == b'\n').unwrap()],
            ),
        ];
        for (what, bytes) in cases {
            std::fs::write(&path, bytes).unwrap();
            assert!(read(&path).is_none(), "a file with {what} is ignored");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
