//! The cache directory, opened once and then reached only through directory descriptors.
//!
//! The cache holds native code (the compiled guest) that spade maps executable, so nobody but
//! its owner may be able to change what spade reads from it or make spade write somewhere
//! else. Checking paths is not enough: between a check by path and the open that follows,
//! whoever controls a directory on the path can swap what it names. So:
//!
//! - [`CacheDir::open`] resolves the path it is given once (symbolic links and `..` in it are
//!   followed, as for any path a user names), then opens every directory from `/` down with
//!   `O_NOFOLLOW` and `fstat`s what it opened. A directory above the cache must be owned by
//!   root or this user and, when others can write to it, sticky (as `/tmp` is), so that no
//!   one else can rename what is below it. The cache directory and every directory in it
//!   ([`CacheDir::subdir`]) must be owned by this user and writable by no one else; missing
//!   ones are created `0700`. Anything else is refused with an error that says why.
//! - Files are opened relative to those descriptors, with `O_NOFOLLOW`, and checked on the
//!   open descriptor (a regular file, owned by this user, writable by no one else) before
//!   they are read ([`CacheDir::read`]). What was verified is what is read: the bytes are
//!   copied into this process's memory, never mapped, so a file truncated later cannot fault
//!   the process (a mapped file's lost pages raise `SIGBUS`).
//! - Files are written under a temporary name drawn from the system's random source, created
//!   exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`, `0600`), then renamed over the real name
//!   within the same directory descriptor ([`CacheDir::write_atomic`]): a planted file or
//!   link under the temporary name makes the create fail instead of being followed, and two
//!   writers (threads or processes) never share a temporary file.

#[cfg(not(unix))]
compile_error!("spade-sandbox's cache reaches its files through unix directory descriptors");

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Mode bits that let the group or others write.
const OTHERS_WRITE: u32 = 0o022;
/// The sticky bit: in a directory, only an entry's owner may rename or remove it.
const STICKY: u32 = 0o1000;

/// An open directory of the cache, verified private to this user.
#[derive(Debug)]
pub(crate) struct CacheDir {
    fd: OwnedFd,
    /// The path it was opened by, for messages.
    path: PathBuf,
}

impl CacheDir {
    /// Opens the cache directory at `path`, creating it (and missing parents, `0700`) when
    /// it does not exist; the error says why a directory was refused.
    pub(crate) fn open(path: &Path) -> Result<CacheDir, String> {
        let absolute =
            std::path::absolute(path).map_err(|e| format!("resolving {}: {e}", path.display()))?;
        let (existing, missing) = split_existing(&absolute)?;
        let resolved = existing
            .canonicalize()
            .map_err(|e| format!("resolving {}: {e}", existing.display()))?;
        let mut names: Vec<OsString> = resolved
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name.to_owned()),
                _ => None,
            })
            .collect();
        let first_missing = names.len();
        names.extend(missing);

        let mut current = PathBuf::from("/");
        let mut fd = rustix::fs::open(
            "/",
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("opening /: {e}"))?;
        check_ancestor(&fd, &current)?;
        for (n, name) in names.iter().enumerate() {
            current.push(name);
            fd = open_dir(&fd, name.as_os_str(), n >= first_missing, &current)?;
            if n + 1 < names.len() {
                check_ancestor(&fd, &current)?;
            }
        }
        check_private_dir(&fd, &current, "the cache directory")?;
        Ok(CacheDir { fd, path: current })
    }

    /// The directory `name` inside this one, created `0700` when missing; refused unless it
    /// is a directory (not a link) private to this user.
    pub(crate) fn subdir(&self, name: &str) -> Result<CacheDir, String> {
        let path = self.path.join(name);
        let fd = open_dir(&self.fd, name.as_ref(), true, &path)?;
        check_private_dir(&fd, &path, "the cache directory")?;
        Ok(CacheDir { fd, path })
    }

    /// The path this directory was opened by.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The contents of the file `name`, `None` when there is none. A link, or a file that is
    /// not regular, not this user's or writable by others, is an error.
    pub(crate) fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let Some(mut file) = self.open_verified(name)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| format!("reading {}: {e}", self.path.join(name).display()))?;
        Ok(Some(bytes))
    }

    /// The file `name` opened for reading and verified on its descriptor (as for
    /// [`CacheDir::read`]), `None` when there is none.
    pub(crate) fn open_verified(&self, name: &str) -> Result<Option<File>, String> {
        let path = self.path.join(name);
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(format!(
                    "{} is a symbolic link; spade's cache holds no links",
                    path.display()
                ));
            }
            Err(e) => return Err(format!("opening {}: {e}", path.display())),
        };
        check_private_file(&fd, &path)?;
        Ok(Some(File::from(fd)))
    }

    /// Writes `parts` to the file `name` through an exclusively created temporary file and a
    /// rename in this directory, so a crash never leaves a partial file under the real name.
    pub(crate) fn write_atomic(&self, name: &str, parts: &[&[u8]]) -> std::io::Result<()> {
        let (tmp, fd) = self.create_temporary(name)?;
        let written = (|| {
            let mut file = File::from(fd);
            for part in parts {
                file.write_all(part)?;
            }
            drop(file);
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written
    }

    /// A new file `.NAME.RANDOM.tmp`, created exclusively (a name that exists, a planted link
    /// included, is never opened: another random name is drawn).
    fn create_temporary(&self, name: &str) -> std::io::Result<(String, OwnedFd)> {
        const ATTEMPTS: usize = 8;
        for _ in 0..ATTEMPTS {
            let mut random = [0u8; 12];
            getrandom::fill(&mut random).map_err(std::io::Error::other)?;
            let tmp = format!(".{name}.{}.tmp", hex::encode(random));
            match rustix::fs::openat(
                &self.fd,
                &tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => return Ok((tmp, fd)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(std::io::Error::other(format!(
            "{ATTEMPTS} random temporary names in {} already existed",
            self.path.display()
        )))
    }

    /// The regular files of this directory (temporary files, which start with a dot, left
    /// out): name, size in bytes and modification time (nanoseconds since the epoch), in no
    /// particular order. A file removed while it is listed is left out.
    pub(crate) fn files(&self) -> std::io::Result<Vec<CachedFile>> {
        let mut files = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let Ok(stat) = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                continue;
            }
            files.push(CachedFile {
                name: name.to_owned(),
                bytes: stat.st_size as u64,
                modified_nanos: (stat.st_mtime as i128) * 1_000_000_000
                    + stat.st_mtime_nsec as i128,
            });
        }
        Ok(files)
    }

    /// Removes the least recently used files of this directory (oldest modification time
    /// first: a read touches its file) that `removable` allows, until all of its files hold at
    /// most `budget` bytes; returns how many were removed. Files that are not removable stay
    /// even past the budget. A file that cannot be removed is left for the next trim.
    pub(crate) fn trim_lru(&self, budget: u64, removable: impl Fn(&str) -> bool) -> usize {
        let Ok(mut files) = self.files() else {
            return 0;
        };
        let mut total: u64 = files.iter().map(|file| file.bytes).sum();
        if total <= budget {
            return 0;
        }
        files.sort_by_key(|file| file.modified_nanos);
        let mut removed = 0;
        for file in files {
            if total <= budget {
                break;
            }
            if !removable(&file.name) {
                continue;
            }
            if self.remove(&file.name).is_ok() {
                total = total.saturating_sub(file.bytes);
                removed += 1;
            }
        }
        removed
    }

    /// Removes the file `name` (a missing file is not an error).
    pub(crate) fn remove(&self, name: &str) -> std::io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets the modification time of the file `name` to now (it was just used), when it is a
    /// verified file of this directory.
    pub(crate) fn touch(&self, name: &str) -> Result<(), String> {
        if let Some(file) = self.open_verified(name)? {
            file.set_modified(std::time::SystemTime::now())
                .map_err(|e| format!("touching {}: {e}", self.path.join(name).display()))?;
        }
        Ok(())
    }

    /// An exclusive lock on the file `name` (created `0600` when missing), held until the
    /// returned file is dropped.
    pub(crate) fn lock(&self, name: &str) -> Result<File, String> {
        let path = self.path.join(name);
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            Errno::LOOP => format!("{} is a symbolic link", path.display()),
            e => format!("opening {}: {e}", path.display()),
        })?;
        check_private_file(&fd, &path)?;
        let file = File::from(fd);
        file.lock()
            .map_err(|e| format!("locking {}: {e}", path.display()))?;
        Ok(file)
    }
}

/// A file of a cache directory, as [`CacheDir::files`] lists it.
#[derive(Debug, Clone)]
pub(crate) struct CachedFile {
    pub name: String,
    pub bytes: u64,
    pub modified_nanos: i128,
}

/// `path` split into its longest prefix that exists and the names below it that do not;
/// `..` among the missing names is refused (it cannot be resolved).
fn split_existing(path: &Path) -> Result<(PathBuf, Vec<OsString>), String> {
    let mut existing = path.to_owned();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name() else {
            break;
        };
        missing.push(name.to_owned());
        if !existing.pop() {
            break;
        }
    }
    if path.ends_with("..") || (!missing.is_empty() && missing.iter().any(|n| n == "..")) {
        return Err(format!(
            "{} has `..` below a directory that does not exist",
            path.display()
        ));
    }
    missing.reverse();
    Ok((existing, missing))
}

/// Opens the directory `name` in `parent` without following a link, creating it (`0700`)
/// when `create` and it is missing.
fn open_dir(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    create: bool,
    path: &Path,
) -> Result<OwnedFd, String> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let open = || rustix::fs::openat(parent, name, flags, Mode::empty());
    let opened = match open() {
        Err(Errno::NOENT) if create => {
            match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => open(),
                Err(e) => return Err(format!("creating {}: {e}", path.display())),
            }
        }
        other => other,
    };
    opened.map_err(|e| match e {
        // O_NOFOLLOW on a link fails with ELOOP; O_DIRECTORY on a file with ENOTDIR (and on a
        // link, on some systems).
        Errno::LOOP | Errno::NOTDIR => format!(
            "refusing the cache directory: {} is a symbolic link or not a directory (it was \
             one when the path was resolved, so it was replaced since)",
            path.display()
        ),
        e => format!("opening {}: {e}", path.display()),
    })
}

/// This process's effective user id.
fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn stat(fd: &OwnedFd, path: &Path) -> Result<Stat, String> {
    rustix::fs::fstat(fd).map_err(|e| format!("reading the permissions of {}: {e}", path.display()))
}

fn mode_of(stat: &Stat) -> u32 {
    // `st_mode` is a u32 on Linux and a u16 on the BSDs and macOS.
    #[allow(clippy::unnecessary_cast)]
    let mode = stat.st_mode as u32;
    mode & 0o7777
}

/// Who can write, for a message.
fn writers(mode: u32) -> &'static str {
    if mode & 0o002 != 0 {
        "every user"
    } else {
        "its group"
    }
}

/// A directory above the cache: owned by root or this user, and sticky when others may write.
fn check_ancestor(fd: &OwnedFd, path: &Path) -> Result<(), String> {
    let stat = stat(fd, path)?;
    let mode = mode_of(&stat);
    let owner = stat.st_uid;
    let why = if owner != 0 && owner != me() {
        format!(
            "{} is owned by uid {owner}, who could replace the cache below it",
            path.display()
        )
    } else if mode & OTHERS_WRITE != 0 && mode & STICKY == 0 {
        format!(
            "{} is writable by {} (mode {mode:04o}) and not sticky, so others could replace the \
             cache below it",
            path.display(),
            writers(mode)
        )
    } else {
        return Ok(());
    };
    Err(format!(
        "refusing the cache directory: {why}. Put the cache (SPADE_CACHE_DIR) under a \
         directory only you and root can change"
    ))
}

/// The cache directory or one inside it: a directory owned by this user that no one else can
/// write.
fn check_private_dir(fd: &OwnedFd, path: &Path, what: &str) -> Result<(), String> {
    let stat = stat(fd, path)?;
    check_private(&stat, path, what, FileType::Directory)
}

/// A cached file: a regular file owned by this user that no one else can write.
fn check_private_file(fd: &OwnedFd, path: &Path) -> Result<(), String> {
    let stat = stat(fd, path)?;
    check_private(&stat, path, "the cached file", FileType::RegularFile)
}

fn check_private(stat: &Stat, path: &Path, what: &str, kind: FileType) -> Result<(), String> {
    let mode = mode_of(stat);
    let me = me();
    let why = if FileType::from_raw_mode(stat.st_mode) != kind {
        let kind = if kind == FileType::Directory {
            "directory"
        } else {
            "regular file"
        };
        format!("{what} {} is not a {kind}", path.display())
    } else if stat.st_uid != me {
        format!(
            "{what} {} is owned by uid {}, not by this user (uid {me})",
            path.display(),
            stat.st_uid
        )
    } else if mode & OTHERS_WRITE != 0 {
        format!(
            "{what} {} is writable by {} (mode {mode:04o})",
            path.display(),
            writers(mode)
        )
    } else {
        return Ok(());
    };
    Err(format!(
        "refusing the cache: {why}. The cache holds native code that spade loads and runs, so \
         only its owner may be able to change it; fix the permissions (chmod go-w) or remove \
         it to have it created again"
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    /// A fresh directory under the system's temporary directory, for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("spade-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn the_cache_is_created_private_and_files_are_written_private() {
        let root = scratch("create");
        let dir = CacheDir::open(&root.join("a").join("spade")).unwrap();
        assert_eq!(mode(&root), 0o700, "missing parents are created private");
        assert_eq!(mode(dir.path()), 0o700);
        let sub = dir.subdir("snapshots").unwrap();
        assert_eq!(mode(sub.path()), 0o700);
        sub.write_atomic("f", &[b"one ", b"two"]).unwrap();
        assert_eq!(mode(&sub.path().join("f")), 0o600);
        assert_eq!(sub.read("f").unwrap().unwrap(), b"one two");
        assert_eq!(sub.read("missing").unwrap(), None);
        let entries: Vec<_> = std::fs::read_dir(sub.path()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no temporary file is left behind");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_link_is_never_followed_for_a_write_a_read_or_a_lock() {
        let root = scratch("links");
        let dir = CacheDir::open(&root.join("cache")).unwrap();
        let victim = root.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        for name in ["artifact", "lockfile"] {
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
        }

        let err = dir.read("artifact").unwrap_err();
        assert!(err.contains("is a symbolic link"), "{err}");
        let err = dir.lock("lockfile").unwrap_err();
        assert!(err.contains("is a symbolic link"), "{err}");
        // A write renames over the link, replacing the link itself.
        dir.write_atomic("artifact", &[b"new"]).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            std::fs::symlink_metadata(dir.path().join("artifact"))
                .unwrap()
                .is_file()
        );

        // A directory inside the cache that is a link is refused, not entered.
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        chmod(&elsewhere, 0o700);
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("snapshots")).unwrap();
        let err = dir.subdir("snapshots").unwrap_err();
        assert!(
            err.contains("snapshots is a symbolic link or not a directory"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_directory_others_can_write_is_refused_wherever_it_is() {
        let root = scratch("perms");
        let cache = root.join("cache");
        CacheDir::open(&cache).unwrap();

        chmod(&cache, 0o777);
        let err = CacheDir::open(&cache).unwrap_err();
        assert!(
            err.contains(&format!(
                "the cache directory {} is writable by every user (mode 0777)",
                cache.display()
            )),
            "{err}"
        );
        chmod(&cache, 0o700);

        let snapshots = cache.join("snapshots");
        std::fs::create_dir(&snapshots).unwrap();
        chmod(&snapshots, 0o770);
        let err = CacheDir::open(&cache)
            .unwrap()
            .subdir("snapshots")
            .unwrap_err();
        assert!(
            err.contains("is writable by its group (mode 0770)"),
            "{err}"
        );

        // Above the cache: writable by others is refused unless sticky (as /tmp is).
        chmod(&root, 0o777);
        let err = CacheDir::open(&cache).unwrap_err();
        assert!(
            err.contains(&format!(
                "{} is writable by every user (mode 0777) and not sticky",
                root.display()
            )),
            "{err}"
        );
        chmod(&root, 0o1777);
        CacheDir::open(&cache).expect("a sticky directory above the cache is accepted");
        chmod(&root, 0o700);

        // A file others can write is refused on the open descriptor.
        let dir = CacheDir::open(&cache).unwrap();
        dir.write_atomic("f", &[b"x"]).unwrap();
        chmod(&cache.join("f"), 0o646);
        let err = dir.read("f").unwrap_err();
        assert!(
            err.contains("is writable by every user (mode 0646)"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_directory_another_user_owns_is_refused() {
        if me() != 0 {
            eprintln!("skipped: only root can give a directory to another user");
            return;
        }
        let root = scratch("owner");
        let cache = root.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        // The attack of the issue: another user pre-creates the cache directory, mode 0777.
        chmod(&cache, 0o777);
        std::os::unix::fs::chown(&cache, Some(4242), Some(4242)).unwrap();
        let err = CacheDir::open(&cache).unwrap_err();
        assert!(
            err.contains(&format!(
                "the cache directory {} is owned by uid 4242, not by this user (uid 0)",
                cache.display()
            )),
            "{err}"
        );
        // Owned by another user above the cache.
        chmod(&cache, 0o700);
        std::os::unix::fs::chown(&cache, Some(0), Some(0)).unwrap();
        std::os::unix::fs::chown(&root, Some(4242), Some(4242)).unwrap();
        let err = CacheDir::open(&cache).unwrap_err();
        assert!(
            err.contains(&format!("{} is owned by uid 4242", root.display())),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn concurrent_writers_of_one_name_never_share_a_temporary_file() {
        let root = scratch("race");
        let dir = CacheDir::open(&root).unwrap();
        let contents: Vec<Vec<u8>> = (0..8u8).map(|n| vec![n; 1 << 20]).collect();
        std::thread::scope(|scope| {
            for bytes in &contents {
                let dir = &dir;
                scope.spawn(move || {
                    for _ in 0..4 {
                        dir.write_atomic("shared", &[bytes]).unwrap();
                    }
                });
            }
        });
        let written = dir.read("shared").unwrap().unwrap();
        assert!(
            contents.contains(&written),
            "the file is one writer's whole contents, never a mix"
        );
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
