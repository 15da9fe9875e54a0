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

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::artifact::private;
use crate::cache::snapshot::{LoadPlan, MAX_SNAPSHOT_BYTES, PAGE, RECORD, Records, Snapshot};
use crate::sandbox::EnvInfo;
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
/// The pages are mapped, not read: the restores copy them straight from the page cache, so a
/// process that starts for one episode neither allocates nor page-faults a buffer for them.
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
    let start = line.len() + 1;
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
            // A damaged length must not stand for more than a snapshot can hold.
            if figures.records_len > MAX_SNAPSHOT_BYTES / PAGE * RECORD {
                return None;
            }
            let map = map_records(file.get_ref())?;
            // A file shorter or longer than its records is damaged.
            if map.len() != start + figures.records_len
                || crc32fast::hash(&map[start..]) != figures.crc32
            {
                return None;
            }
            let records = Records::Mapped { map, start };
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

/// `file` mapped read-only, all its pages mapped by the one call (rather than a fault per 16
/// pages as they are first read).
#[allow(unsafe_code)]
fn map_records(file: &std::fs::File) -> Option<memmap2::Mmap> {
    // SAFETY: the mapping is read-only and its bytes are only ever read as bytes. The file is
    // private to this user (checked by the caller) and spade never changes one in place: it
    // writes a new file and renames it over the old one, which leaves a mapped file's pages as
    // they were. The compiled guest in the same directory is mapped under the same contract.
    unsafe { memmap2::MmapOptions::new().populate().map(file) }.ok()
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
                records: Records::Captured((0..4 * RECORD).map(|i| (i % 251) as u8).collect()),
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

    /// An empty directory private to the user, named for `name` and this process.
    fn private_temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        private::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_written_plan_reads_back_and_a_damaged_file_is_ignored() {
        let dir = private_temp_dir("spade-snapcache");
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
        assert!(
            matches!(snapshot.records, Records::Mapped { .. }),
            "the pages are mapped from the file, not read into a buffer"
        );
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

    #[test]
    fn a_mapped_snapshot_keeps_its_pages_when_the_file_is_rewritten() {
        let dir = private_temp_dir("spade-snapremap");
        let path = dir.join("plan.snap");
        let first = plan();
        write(&path, &first).unwrap();
        let mapped = read(&path).expect("an intact file is read");

        // Another process caches a different snapshot for the same key: written beside the
        // file and renamed over it, so the mapping above still sees the pages it mapped.
        let LoadPlan::Deferred {
            snapshot: Some(snapshot),
            ..
        } = &first
        else {
            unreachable!("`plan` has a snapshot");
        };
        let other: Vec<u8> = snapshot.records.iter().map(|b| b.wrapping_add(1)).collect();
        let second = LoadPlan::Deferred {
            seed_before_construct: false,
            snapshot: Some(Arc::new(Snapshot {
                wasm_pages: snapshot.wasm_pages,
                records: Records::Captured(other.clone()),
                dirty_pages: snapshot.dirty_pages,
                later_pages: Vec::new(),
                constructed: None,
                load_fuel: 1,
                clock_nanos: 1,
            })),
        };
        write(&path, &second).unwrap();

        assert_eq!(records(&mapped), records(&first));
        assert_eq!(records(&read(&path).unwrap()), &other[..]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
