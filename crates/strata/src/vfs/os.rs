//! [`OsFs`]: the real filesystem through `std::fs`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{DirLock, Fs, ReadableFile, WritableFile};
use crate::error::{Error, Result};

/// The operating system's filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

struct OsWritable {
    file: File,
    path: PathBuf,
    len: u64,
}

impl WritableFile for OsWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file.write_all(data).map_err(|e| Error::io(&self.path, e))?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct OsReadable {
    file: File,
    path: PathBuf,
    len: u64,
}

impl ReadableFile for OsReadable {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset.checked_add(len as u64).is_none_or(|end| end > self.len) {
            return Err(Error::corruption(
                &self.path,
                offset,
                format!("read of {len} bytes past end of file ({})", self.len),
            ));
        }
        // Checked before the buffer is allocated: a corrupt length must not allocate.
        let mut buf = vec![0u8; len];
        ReadableFile::read_exact_at(self, offset, &mut buf)?;
        Ok(buf)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > self.len) {
            return Err(Error::corruption(
                &self.path,
                offset,
                format!("read of {} bytes past end of file ({})", buf.len(), self.len),
            ));
        }
        FileExt::read_exact_at(&self.file, buf, offset).map_err(|e| Error::io(&self.path, e))
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct OsLock {
    _file: File,
}

impl DirLock for OsLock {}

impl Fs for OsFs {
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file =
            OpenOptions::new().write(true).create(true).truncate(true).open(path).map_err(|e| Error::io(path, e))?;
        Ok(Box::new(OsWritable { file, path: path.to_owned(), len: 0 }))
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Arc::new(OsReadable { file, path: path.to_owned(), len }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io(from, e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let e = e.map_err(|e| Error::io(dir, e))?;
            if let Some(n) = e.file_name().to_str() {
                out.push(n.to_owned());
            }
        }
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(OsLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked(path.to_owned())),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
        }
    }
}
