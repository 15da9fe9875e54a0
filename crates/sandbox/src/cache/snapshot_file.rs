//! Load plans and snapshots cached on disk, so that a new process starts its first sandbox of
//! a known source from the snapshot instead of probing the source again.
//!
//! One file per source, `max_turns`, limits and snapshot setting, under the artifact cache
//! directory, named by a hash of those and of the compiled guest's key: a different guest,
//! engine or spade build never reads another's file. A file is a JSON header line (the plan,
//! the snapshot's figures, the CRC-32 of its pages, which catches a damaged file at a tenth
//! of a sha256's cost) followed by the pages. Files are written and read through the cache's
//! directory descriptors ([`crate::cache::dir`]): private to the user (0600, via an exclusive
//! temporary name and a rename), read into memory only when no one else can write them. A file
//! that is missing, damaged or not private is ignored and the source is probed as if there
//! were no cache (the next write replaces it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::dir::CacheDir;
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

/// The directory of the snapshot files, inside the cache directory.
pub(crate) const SUBDIR: &str = "snapshots";

/// The file name of the plan for `source_sha256` and `key` (in [`SUBDIR`]).
pub(crate) fn name(artifact_key: &str, source_sha256: &str, key: &PlanKey) -> String {
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
    format!("{}.snap", &name[..32])
}

/// Where the plan for `source_sha256` and `key` is cached under the cache directory `dir`.
pub(crate) fn path(dir: &Path, artifact_key: &str, source_sha256: &str, key: &PlanKey) -> PathBuf {
    dir.join(SUBDIR)
        .join(name(artifact_key, source_sha256, key))
}

/// The cached plan `name` in `dir`, if there is a readable, intact, private one.
pub(crate) fn read(dir: &CacheDir, name: &str) -> Option<LoadPlan> {
    parse(dir.read(name).ok()??)
}

/// The plan a file's `bytes` hold, if they are intact.
fn parse(bytes: Vec<u8>) -> Option<LoadPlan> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let start = newline + 1;
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
            // A damaged length must not stand for more than a snapshot can hold.
            if figures.records_len > MAX_SNAPSHOT_BYTES / PAGE * RECORD {
                return None;
            }
            // A file shorter or longer than its records is damaged.
            if bytes.len() != start + figures.records_len
                || crc32fast::hash(&bytes[start..]) != figures.crc32
            {
                return None;
            }
            Some(Arc::new(Snapshot {
                wasm_pages: figures.wasm_pages,
                records: Records::read(bytes, start),
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

/// Writes `plan` to the file `name` in `dir` (atomically, private to the user).
pub(crate) fn write(dir: &CacheDir, name: &str, plan: &LoadPlan) -> std::io::Result<()> {
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
    dir.write_atomic(name, &[&head, data])
}

/// Removes the least recently used snapshot files of `dir` (oldest modification time first: a
/// read touches its file) that `in_use` does not name, until the rest hold at most `budget`
/// bytes; returns how many were removed. Files in use stay even past the budget (the plans in
/// memory bound them). A file that cannot be removed is left for the next trim.
pub(crate) fn trim(dir: &CacheDir, budget: u64, in_use: impl Fn(&str) -> bool) -> usize {
    dir.trim_lru(budget, |name| name.ends_with(".snap") && !in_use(name))
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
                records: Records::captured((0..4 * RECORD).map(|i| (i % 251) as u8).collect()),
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

    /// An empty cache directory private to the user, named for `name` and this process.
    fn private_temp_dir(name: &str) -> CacheDir {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        CacheDir::open(&dir).unwrap()
    }

    #[test]
    fn a_written_plan_reads_back_and_a_damaged_file_is_ignored() {
        let dir = private_temp_dir("spade-snapcache");
        let path = dir.path().join("plan.snap");
        let written = plan();
        write(&dir, "plan.snap", &written).unwrap();

        let read_back = read(&dir, "plan.snap").expect("an intact file is read");
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
            assert!(
                read(&dir, "plan.snap").is_none(),
                "a file with {what} is ignored"
            );
        }
        std::fs::remove_dir_all(dir.path()).unwrap();
    }

    #[test]
    fn a_read_snapshot_keeps_its_pages_when_the_file_is_truncated_or_rewritten() {
        let dir = private_temp_dir("spade-snaptrunc");
        let path = dir.path().join("plan.snap");
        let first = plan();
        write(&dir, "plan.snap", &first).unwrap();
        let loaded = read(&dir, "plan.snap").expect("an intact file is read");

        // Truncated in place (what no spade process does, but anyone who can write the cache
        // or a full disk can): a mapping would fault on its lost pages; the copy is intact.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(10)
            .unwrap();
        assert_eq!(records(&loaded), records(&first));
        assert!(
            read(&dir, "plan.snap").is_none(),
            "the truncated file is ignored"
        );

        // Rewritten by another process for the same key.
        write(&dir, "plan.snap", &plan()).unwrap();
        assert_eq!(records(&loaded), records(&first));
        std::fs::remove_dir_all(dir.path()).unwrap();
    }

    #[test]
    fn a_trim_removes_the_least_recently_used_files_not_in_use_until_the_rest_fit() {
        let dir = private_temp_dir("spade-snapshot-trim");
        let names = ["a.snap", "b.snap", "c.snap", "d.snap"];
        let now = std::time::SystemTime::now();
        for (age, name) in names.iter().enumerate() {
            write(&dir, name, &plan()).unwrap();
            let file = std::fs::File::options()
                .write(true)
                .open(dir.path().join(name))
                .unwrap();
            // "a" is the oldest, "d" the newest.
            let modified = now - std::time::Duration::from_secs(100 - age as u64);
            file.set_modified(modified).unwrap();
        }
        let size = std::fs::metadata(dir.path().join("a.snap")).unwrap().len();
        // Within the budget: nothing goes.
        assert_eq!(trim(&dir, 4 * size, |_| false), 0);
        // Room for two: the two oldest go, except "a", which a plan uses; so "b" and "c".
        assert_eq!(trim(&dir, 2 * size, |name| name == "a.snap"), 2);
        let mut left: Vec<String> = dir.files().unwrap().into_iter().map(|f| f.name).collect();
        left.sort();
        assert_eq!(left, ["a.snap", "d.snap"]);
        // A read touches its file: after "a" is read and touched, "d" is the oldest.
        assert!(read(&dir, "a.snap").is_some());
        dir.touch("a.snap").unwrap();
        assert_eq!(trim(&dir, size, |_| false), 1);
        let left: Vec<String> = dir.files().unwrap().into_iter().map(|f| f.name).collect();
        assert_eq!(left, ["a.snap"]);
        let _ = std::fs::remove_dir_all(dir.path());
    }
}
