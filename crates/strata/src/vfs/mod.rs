//! The filesystem seam. Every file strata touches is created, read, renamed, synced and removed
//! through [`Fs`], so tests can swap in [`FaultFs`] (in memory, with injected failures and
//! simulated crashes) and tiering experiments [`SlowFs`] (directories that behave like slower
//! devices).
//!
//! Paths are full paths; an `Fs` has no notion of a current directory, so one database can span
//! several directories. Implementations must be usable from any thread.

mod fault;
mod os;
mod slow;

pub use fault::{FaultFs, FaultKind};
pub use os::OsFs;
pub use slow::{Device, DeviceProfile, SlowFs};

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;

/// A file opened for appending. Data is durable only after [`WritableFile::sync`] returns Ok.
pub trait WritableFile: Send {
    /// Appends bytes at the end of the file (handed to the OS, not yet durable).
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<()>;
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True when nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file opened for positional reads; shared between threads.
pub trait ReadableFile: Send + Sync {
    /// Reads exactly `len` bytes at `offset`; reading past the end is an error.
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// Reads exactly `buf.len()` bytes at `offset` into `buf` (a caller's buffer used again and
    /// again, so reads need not allocate and clear one each); reading past the end is an error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(&self.read_at(offset, buf.len())?);
        Ok(())
    }
    /// File size in bytes.
    fn len(&self) -> u64;
    /// True for an empty file.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An exclusive lock on a database directory, released on drop.
pub trait DirLock: Send + Sync {}

/// Every file operation strata performs.
pub trait Fs: Send + Sync + 'static {
    /// Creates a directory and its parents (durable at once).
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Creates (or truncates) a file for appending.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Opens an existing file for reading.
    fn open(&self, path: &Path) -> Result<Arc<dyn ReadableFile>>;
    /// Atomically renames a file (durable once the directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Names of the files directly inside `dir`.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Whether a file exists.
    fn exists(&self, path: &Path) -> bool;
    /// Makes creations, renames and removals inside `dir` durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Takes an exclusive lock on `path`, failing with [`Error::Locked`](crate::Error::Locked) if held.
    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>>;

    /// Reads a whole file.
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        let f = self.open(path)?;
        f.read_at(0, f.len() as usize)
    }
}
