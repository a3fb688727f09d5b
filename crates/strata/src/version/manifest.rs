//! The manifest: a log of version edits (framed exactly like WAL records) plus a `CURRENT` file
//! naming the live manifest. A new manifest starts with a full snapshot of the state; switching
//! to it is atomic: write `CURRENT.tmp`, sync it, rename over `CURRENT`, sync the directory.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::vfs::{Fs, WritableFile};
use crate::write::wal::{file_header, frame, read_log, Tail, MANIFEST_MAGIC};

/// File name of manifest number `n`.
pub(crate) fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:06}")
}

/// Appends edits to one manifest file.
pub(crate) struct ManifestWriter {
    file: Box<dyn WritableFile>,
    pub(crate) number: u64,
}

impl ManifestWriter {
    /// Creates manifest `number` in `dir`, writes `snapshot` as its first record and syncs.
    pub(crate) fn create(fs: &dyn Fs, dir: &Path, number: u64, snapshot: &[u8]) -> Result<Self> {
        let path = dir.join(manifest_name(number));
        let mut file = fs.create(&path)?;
        file.append(&file_header(MANIFEST_MAGIC))?;
        let mut w = ManifestWriter { file, number };
        w.append(snapshot)?;
        Ok(w)
    }

    /// Appends one edit and syncs.
    pub(crate) fn append(&mut self, edit: &[u8]) -> Result<()> {
        let mut buf = Vec::with_capacity(edit.len() + 12);
        frame(edit, &mut buf);
        self.file.append(&buf)?;
        self.file.sync()
    }

    pub(crate) fn size(&self) -> u64 {
        self.file.len()
    }
}

/// Points `CURRENT` at manifest `number`, atomically and durably.
pub(crate) fn set_current(fs: &dyn Fs, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let mut f = fs.create(&tmp)?;
    f.append(format!("{}\n", manifest_name(number)).as_bytes())?;
    f.sync()?;
    fs.rename(&tmp, &dir.join("CURRENT"))?;
    fs.sync_dir(dir)
}

/// Reads `CURRENT` and returns the live manifest's path and number.
pub(crate) fn current(fs: &dyn Fs, dir: &Path) -> Result<(PathBuf, u64)> {
    let path = dir.join("CURRENT");
    let raw = fs.read_all(&path)?;
    let bad = || Error::corruption(&path, 0, "CURRENT does not name a manifest");
    let s = std::str::from_utf8(&raw).map_err(|_| bad())?;
    let name = s.strip_suffix('\n').ok_or_else(bad)?;
    let n = name.strip_prefix("MANIFEST-").and_then(|n| n.parse::<u64>().ok()).ok_or_else(bad)?;
    Ok((dir.join(name), n))
}

/// Reads every edit payload of a manifest. Manifest records are synced one by one, so only the
/// very last one can be torn by a crash; that one is ignored (it was never acknowledged).
pub(crate) fn read_edits(fs: &dyn Fs, path: &Path) -> Result<Vec<Vec<u8>>> {
    let (recs, tail) = read_log(fs, path, MANIFEST_MAGIC)?;
    if recs.is_empty() {
        let off = match tail {
            Tail::Truncated(o) => o,
            Tail::Clean => 0,
        };
        return Err(Error::corruption(path, off, "manifest holds no complete record"));
    }
    Ok(recs)
}
