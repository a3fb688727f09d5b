//! [`FaultFs`]: an in-memory filesystem for tests that can fail, tear and corrupt, and can
//! simulate a machine crash.
//!
//! Durability model: a file's bytes survive a crash only up to the length at its last `sync`;
//! a name (creation, rename, removal) survives only once its directory was synced. [`FaultFs::crash`]
//! rewinds everything to that durable image and makes every later call fail until
//! [`FaultFs::restart`], so threads of the "dead" process cannot touch the new one's files.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{DirLock, Fs, ReadableFile, WritableFile};
use crate::error::{Error, Result};

/// How an injected write fault behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The write fails and nothing is written.
    Fail,
    /// Half of the bytes are written, then the write fails.
    Torn,
    /// The write fails with "no space left on device" and nothing is written.
    NoSpace,
}

#[derive(Debug, Clone)]
struct Trigger {
    path_contains: String,
    countdown: u64,
    fired: bool,
}

impl Trigger {
    /// Counts a matching operation; true once the trigger has fired (it stays fired).
    fn hit(&mut self, path: &Path) -> bool {
        if self.fired {
            return true;
        }
        if !path.to_string_lossy().contains(&self.path_contains) {
            return false;
        }
        if self.countdown == 0 {
            self.fired = true;
            return true;
        }
        self.countdown -= 1;
        false
    }

    fn matches(&self, path: &Path) -> bool {
        path.to_string_lossy().contains(&self.path_contains)
    }
}

#[derive(Default)]
struct MemFile {
    data: Vec<u8>,
    synced: usize,
}

#[derive(Default)]
struct State {
    files: HashMap<u64, Arc<Mutex<MemFile>>>,
    names: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    locks: HashSet<PathBuf>,
    next_id: u64,
    crashed: bool,
    write_fault: Option<(Trigger, FaultKind)>,
    sync_fault: Option<Trigger>,
    /// Write faults injected so far (each failed append counts).
    injected_writes: u64,
    /// Opens fail while set ([`FaultFs::fail_opens`]).
    fail_opens: bool,
    /// Opens refused so far because of it.
    failed_opens: u64,
}

/// In-memory filesystem with fault injection. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

fn injected(path: &Path, kind: FaultKind) -> Error {
    let e = match kind {
        FaultKind::NoSpace => io::Error::from_raw_os_error(28),
        _ => io::Error::other("injected write failure"),
    };
    Error::io(path, e)
}

fn crashed(path: &Path) -> Error {
    Error::io(path, io::Error::other("simulated crash: filesystem is gone"))
}

impl FaultFs {
    /// An empty filesystem.
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, the `after`+1-th append to a path containing `path_contains` (and every one
    /// after it) fails as `kind`.
    pub fn fail_writes(&self, path_contains: &str, after: u64, kind: FaultKind) {
        self.state.lock().write_fault =
            Some((Trigger { path_contains: path_contains.into(), countdown: after, fired: false }, kind));
    }

    /// From now on, the `after`+1-th sync of a matching path (and every one after it) fails.
    pub fn fail_syncs(&self, path_contains: &str, after: u64) {
        self.state.lock().sync_fault =
            Some(Trigger { path_contains: path_contains.into(), countdown: after, fired: false });
    }

    /// While `fail` is set, every open of a file for reading fails (counted by
    /// [`FaultFs::failed_opens`]).
    pub fn fail_opens(&self, fail: bool) {
        self.state.lock().fail_opens = fail;
    }

    /// Opens refused by [`FaultFs::fail_opens`] so far.
    pub fn failed_opens(&self) -> u64 {
        self.state.lock().failed_opens
    }

    /// How many appends failed by an injected write fault so far, so a test can tell that
    /// its fault was reached.
    pub fn injected_writes(&self) -> u64 {
        self.state.lock().injected_writes
    }

    /// Removes injected write and sync faults.
    pub fn clear_faults(&self) {
        let mut s = self.state.lock();
        s.write_fault = None;
        s.sync_fault = None;
    }

    /// Flips one bit of a file in place (in both its current and its durable content).
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> Result<()> {
        let s = self.state.lock();
        let id = *s.names.get(path).ok_or_else(|| Error::io(path, io::ErrorKind::NotFound.into()))?;
        let f = s.files.get(&id).cloned().ok_or_else(|| Error::io(path, io::ErrorKind::NotFound.into()))?;
        let mut f = f.lock();
        let b = f
            .data
            .get_mut(offset as usize)
            .ok_or_else(|| Error::io(path, io::Error::other("flip past end of file")))?;
        *b ^= 1 << (bit % 8);
        Ok(())
    }

    /// Current size of a file, if it exists.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        let s = self.state.lock();
        let id = s.names.get(path)?;
        let f = s.files.get(id)?.clone();
        drop(s);
        let len = f.lock().data.len() as u64;
        Some(len)
    }

    /// Full paths of every file, in order.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.state.lock().names.keys().cloned().collect()
    }

    /// Simulates a power loss: unsynced bytes and unsynced directory changes are lost (with
    /// `torn_seed`, a pseudo-random prefix of each file's unsynced tail survives instead), and
    /// every call fails until [`FaultFs::restart`].
    pub fn crash(&self, torn_seed: Option<u64>) {
        let mut s = self.state.lock();
        s.crashed = true;
        s.names = s.durable.clone();
        s.locks.clear();
        let live: HashSet<u64> = s.names.values().copied().collect();
        s.files.retain(|id, _| live.contains(id));
        let mut x = torn_seed.unwrap_or(0) | 1;
        for f in s.files.values() {
            let mut f = f.lock();
            let unsynced = f.data.len() - f.synced;
            let keep = match torn_seed {
                Some(_) if unsynced > 0 => {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % (unsynced as u64 + 1)) as usize
                }
                _ => 0,
            };
            let len = f.synced + keep;
            f.data.truncate(len);
            f.synced = len;
        }
    }

    /// Brings a crashed filesystem back, as after a reboot.
    pub fn restart(&self) {
        let mut s = self.state.lock();
        s.crashed = false;
        s.write_fault = None;
        s.sync_fault = None;
    }

    fn check(&self, path: &Path) -> Result<()> {
        if self.state.lock().crashed {
            return Err(crashed(path));
        }
        Ok(())
    }
}

struct FaultWritable {
    fs: FaultFs,
    file: Arc<Mutex<MemFile>>,
    path: PathBuf,
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        // The state lock is held across the append so a concurrent crash cannot slip in
        // between the check and the write (lock order: state, then file).
        let mut s = self.fs.state.lock();
        if s.crashed {
            return Err(crashed(&self.path));
        }
        let fault = match &mut s.write_fault {
            Some((t, kind)) => t.hit(&self.path).then_some(*kind),
            None => None,
        };
        s.injected_writes += u64::from(fault.is_some());
        let mut f = self.file.lock();
        match fault {
            None => {
                f.data.extend_from_slice(data);
                Ok(())
            }
            Some(FaultKind::Torn) => {
                f.data.extend_from_slice(&data[..data.len() / 2]);
                Err(injected(&self.path, FaultKind::Torn))
            }
            Some(kind) => Err(injected(&self.path, kind)),
        }
    }

    fn sync(&mut self) -> Result<()> {
        let mut s = self.fs.state.lock();
        if s.crashed {
            return Err(crashed(&self.path));
        }
        if let Some(t) = &mut s.sync_fault {
            if t.hit(&self.path) {
                return Err(Error::io(&self.path, io::Error::other("injected fsync failure")));
            }
        }
        let mut f = self.file.lock();
        f.synced = f.data.len();
        Ok(())
    }

    fn len(&self) -> u64 {
        self.file.lock().data.len() as u64
    }
}

struct FaultReadable {
    file: Arc<Mutex<MemFile>>,
    path: PathBuf,
}

impl ReadableFile for FaultReadable {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let f = self.file.lock();
        let start = offset as usize;
        match start.checked_add(len).and_then(|end| f.data.get(start..end)) {
            Some(b) => Ok(b.to_vec()),
            None => Err(Error::corruption(
                &self.path,
                offset,
                format!("read of {len} bytes past end of file ({})", f.data.len()),
            )),
        }
    }

    fn len(&self) -> u64 {
        self.file.lock().data.len() as u64
    }
}

struct FaultLock {
    fs: FaultFs,
    path: PathBuf,
}

impl DirLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        self.fs.state.lock().locks.remove(&self.path);
    }
}

impl Fs for FaultFs {
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.check(dir)
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(crashed(path));
        }
        if let Some((t, kind)) = &s.write_fault {
            if t.fired && t.matches(path) && *kind == FaultKind::NoSpace {
                return Err(injected(path, FaultKind::NoSpace));
            }
        }
        let id = s.next_id;
        s.next_id += 1;
        let file = Arc::new(Mutex::new(MemFile::default()));
        s.files.insert(id, file.clone());
        s.names.insert(path.to_owned(), id);
        Ok(Box::new(FaultWritable { fs: self.clone(), file, path: path.to_owned() }))
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(crashed(path));
        }
        if s.fail_opens {
            s.failed_opens += 1;
            return Err(Error::io(path, io::Error::other("injected open failure")));
        }
        let file = s
            .names
            .get(path)
            .and_then(|id| s.files.get(id))
            .cloned()
            .ok_or_else(|| Error::io(path, io::ErrorKind::NotFound.into()))?;
        Ok(Arc::new(FaultReadable { file, path: path.to_owned() }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(crashed(from));
        }
        let id = s.names.remove(from).ok_or_else(|| Error::io(from, io::ErrorKind::NotFound.into()))?;
        s.names.insert(to.to_owned(), id);
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(crashed(path));
        }
        s.names.remove(path).ok_or_else(|| Error::io(path, io::ErrorKind::NotFound.into()))?;
        let live: HashSet<u64> = s.names.values().chain(s.durable.values()).copied().collect();
        s.files.retain(|id, _| live.contains(id));
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let s = self.state.lock();
        if s.crashed {
            return Err(crashed(dir));
        }
        Ok(s.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        self.state.lock().names.contains_key(path)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(crashed(dir));
        }
        if let Some(t) = &mut s.sync_fault {
            if t.hit(dir) {
                return Err(Error::io(dir, io::Error::other("injected fsync failure")));
            }
        }
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let current: Vec<(PathBuf, u64)> =
            s.names.iter().filter(|(p, _)| in_dir(p)).map(|(p, i)| (p.clone(), *i)).collect();
        s.durable.retain(|p, _| !in_dir(p));
        s.durable.extend(current);
        let live: HashSet<u64> = s.names.values().chain(s.durable.values()).copied().collect();
        s.files.retain(|id, _| live.contains(id));
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        let mut s = self.state.lock();
        if s.crashed {
            return Err(crashed(path));
        }
        if !s.locks.insert(path.to_owned()) {
            return Err(Error::Locked(path.to_owned()));
        }
        Ok(Box::new(FaultLock { fs: self.clone(), path: path.to_owned() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_only_synced_bytes_and_synced_names() {
        let fs = FaultFs::new();
        let d = Path::new("/db");
        let a = d.join("a");
        let mut w = fs.create(&a).unwrap();
        w.append(b"hello").unwrap();
        w.sync().unwrap();
        fs.sync_dir(d).unwrap();
        w.append(b" world").unwrap();
        let mut w2 = fs.create(&d.join("b")).unwrap();
        w2.append(b"x").unwrap();
        w2.sync().unwrap();
        fs.crash(None);
        assert!(fs.open(&a).is_err(), "calls fail until restart");
        fs.restart();
        assert_eq!(fs.read_all(&a).unwrap(), b"hello");
        assert!(!fs.exists(&d.join("b")), "name never made durable");
    }

    #[test]
    fn injected_faults_fire_after_countdown() {
        let fs = FaultFs::new();
        let p = Path::new("/x/f.log");
        let mut w = fs.create(p).unwrap();
        fs.fail_writes(".log", 1, FaultKind::Torn);
        w.append(b"ok").unwrap();
        assert!(w.append(b"abcd").is_err());
        assert_eq!(fs.read_all(p).unwrap(), b"okab");
        fs.fail_syncs("f.log", 0);
        assert!(w.sync().is_err());
        fs.clear_faults();
        fs.flip_bit(p, 0, 0).unwrap();
        assert_eq!(fs.read_all(p).unwrap()[0], b'o' ^ 1);
    }
}
