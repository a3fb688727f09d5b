//! A group's Raft log and vote, kept in one directory.
//!
//! ```text
//! log    record*                  the entries, in index order
//! state  record                   vote, last purged log id, last committed log id
//! ```
//!
//! `docs/format/raft-log.md` has the layout. Appends are written and synced before Raft is
//! told they are durable; a truncation cuts the file at the first entry removed and syncs.
//! `state` is replaced whole (written beside, synced, renamed, the directory synced). At open,
//! a torn last record (never acknowledged) is cut off and any other damage fails the open.
//! Purged entries leave memory at once and the file when they are more than half of it (it is
//! rewritten without them).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, LogState, RaftLogId, RaftLogReader, StorageError, StorageIOError, Vote};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::types::{Cfg, NodeId};

/// The largest record a log holds (an entry carries one write batch).
const MAX_RECORD: usize = 1 << 30;

/// What `state` holds.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    vote: Option<Vote<NodeId>>,
    purged: Option<LogId<NodeId>>,
    committed: Option<LogId<NodeId>>,
}

struct Inner {
    dir: PathBuf,
    file: File,
    /// The entries held, each with where its record begins in `log`.
    entries: BTreeMap<u64, (Entry<Cfg>, u64)>,
    /// Where the next record goes.
    end: u64,
    state: State,
}

/// A group's Raft log; clones share it (Raft reads it from its replication tasks).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

fn corrupt(path: &Path, at: u64, why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("Raft log {} at byte {at}: {why}", path.display()))
}

fn record(body: &[u8], out: &mut Vec<u8>) {
    let len = (body.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc32c::crc32c(&len).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Records read back: each body with its offset.
type Records = Vec<(u64, Vec<u8>)>;

/// The records of `bytes`: each body with its offset, and where the last whole one ends (a
/// record cut short by the end of the bytes, or the last one failing its body's checksum, is a
/// torn append; any other damage is corruption).
fn records(path: &Path, bytes: &[u8]) -> std::io::Result<(Records, u64)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while bytes.len() - at >= 12 {
        let len = u32_at(bytes, at);
        if crc32c::crc32c(&len.to_le_bytes()) != u32_at(bytes, at + 4) {
            return Err(corrupt(path, at as u64, "a record length fails its checksum"));
        }
        let Some(body) = bytes.get(at + 12..at + 12 + len as usize) else { break };
        if crc32c::crc32c(body) != u32_at(bytes, at + 8) {
            if at + 12 + body.len() == bytes.len() {
                break;
            }
            return Err(corrupt(path, at as u64, "checksum mismatch"));
        }
        out.push((at as u64, body.to_vec()));
        at += 12 + body.len();
    }
    Ok((out, at as u64))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("syncing", dir, e))
}

fn write_state(dir: &Path, state: &State) -> std::io::Result<()> {
    let body = postcard::to_stdvec(state).map_err(std::io::Error::other)?;
    let mut buf = Vec::new();
    record(&body, &mut buf);
    let tmp = dir.join("state.tmp");
    let mut f = File::create(&tmp).map_err(|e| io_error("creating", &tmp, e))?;
    f.write_all(&buf).and_then(|()| f.sync_all()).map_err(|e| io_error("writing", &tmp, e))?;
    let path = dir.join("state");
    std::fs::rename(&tmp, &path).map_err(|e| io_error("renaming", &tmp, e))?;
    sync_dir(dir)
}

fn read_state(dir: &Path) -> std::io::Result<State> {
    let path = dir.join("state");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
        Err(e) => return Err(io_error("reading", &path, e)),
    };
    let (recs, end) = records(&path, &bytes)?;
    match recs.as_slice() {
        [(_, body)] if end == bytes.len() as u64 => {
            postcard::from_bytes(body).map_err(|e| corrupt(&path, 0, &format!("does not decode: {e}")))
        }
        _ => Err(corrupt(&path, 0, "not one whole record")),
    }
}

impl LogStore {
    /// Opens the log in `dir` (created if missing).
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        std::fs::create_dir_all(dir).map_err(|e| io_error("creating", dir, e))?;
        let state = read_state(dir)?;
        let path = dir.join("log");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| io_error("opening", &path, e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| io_error("reading", &path, e))?;
        let (recs, end) = records(&path, &bytes)?;
        if end < bytes.len() as u64 {
            file.set_len(end)
                .and_then(|()| file.sync_all())
                .map_err(|e| io_error("cutting the torn tail of", &path, e))?;
        }
        let mut entries = BTreeMap::new();
        let purged = state.purged.map(|p| p.index);
        for (at, body) in recs {
            let entry: Entry<Cfg> =
                postcard::from_bytes(&body).map_err(|e| corrupt(&path, at, &format!("entry does not decode: {e}")))?;
            let index = entry.get_log_id().index;
            if purged.is_some_and(|p| index <= p) {
                continue;
            }
            if let Some((&last, _)) = entries.last_key_value() {
                if index != last + 1 {
                    return Err(corrupt(&path, at, &format!("entry {index} follows entry {last}")));
                }
            }
            entries.insert(index, (entry, at));
        }
        Ok(LogStore { inner: Arc::new(Mutex::new(Inner { dir: dir.to_path_buf(), file, entries, end, state })) })
    }

    /// The entries held, for tests: their indexes.
    pub fn indexes(&self) -> Vec<u64> {
        self.inner.lock().entries.keys().copied().collect()
    }
}

fn storage_error(e: std::io::Error) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl Inner {
    fn append(&mut self, entries: Vec<Entry<Cfg>>) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut placed = Vec::with_capacity(entries.len());
        for entry in entries {
            let body = postcard::to_stdvec(&entry).map_err(std::io::Error::other)?;
            if body.len() > MAX_RECORD {
                return Err(std::io::Error::other(format!("a log entry of {} bytes", body.len())));
            }
            placed.push((entry, self.end + buf.len() as u64));
            record(&body, &mut buf);
        }
        let path = self.dir.join("log");
        self.file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_error("appending to", &path, e))?;
        self.end += buf.len() as u64;
        for (entry, at) in placed {
            self.entries.insert(entry.get_log_id().index, (entry, at));
        }
        Ok(())
    }

    fn truncate(&mut self, from: u64) -> std::io::Result<()> {
        let cut = self.entries.split_off(&from);
        if let Some((_, (_, at))) = cut.first_key_value() {
            let path = self.dir.join("log");
            self.file.set_len(*at).and_then(|()| self.file.sync_all()).map_err(|e| io_error("truncating", &path, e))?;
            self.end = *at;
        }
        Ok(())
    }

    fn purge(&mut self, upto: LogId<NodeId>) -> std::io::Result<()> {
        self.state.purged = Some(upto);
        write_state(&self.dir, &self.state)?;
        let kept = self.entries.split_off(&(upto.index + 1));
        self.entries = kept;
        // The purged records are the bytes before the first entry held.
        let purged_bytes = self.entries.first_key_value().map_or(self.end, |(_, (_, at))| *at);
        if purged_bytes > self.end / 2 {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Rewrites `log` with only the entries held.
    fn rewrite(&mut self) -> std::io::Result<()> {
        let tmp = self.dir.join("log.tmp");
        let mut buf = Vec::new();
        let mut entries = BTreeMap::new();
        for (index, (entry, _)) in std::mem::take(&mut self.entries) {
            let body = postcard::to_stdvec(&entry).map_err(std::io::Error::other)?;
            entries.insert(index, (entry, buf.len() as u64));
            record(&body, &mut buf);
        }
        let mut f = File::create(&tmp).map_err(|e| io_error("creating", &tmp, e))?;
        f.write_all(&buf).and_then(|()| f.sync_all()).map_err(|e| io_error("writing", &tmp, e))?;
        let path = self.dir.join("log");
        std::fs::rename(&tmp, &path).map_err(|e| io_error("renaming", &tmp, e))?;
        sync_dir(&self.dir)?;
        self.file =
            OpenOptions::new().read(true).append(true).open(&path).map_err(|e| io_error("opening", &path, e))?;
        self.entries = entries;
        self.end = buf.len() as u64;
        Ok(())
    }
}

impl RaftLogReader<Cfg> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<Cfg>>, StorageError<NodeId>> {
        let inner = self.inner.lock();
        Ok(inner.entries.range(range).map(|(_, (e, _))| e.clone()).collect())
    }
}

impl RaftLogStorage<Cfg> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<Cfg>, StorageError<NodeId>> {
        let inner = self.inner.lock();
        let purged = inner.state.purged;
        let last = inner.entries.last_key_value().map(|(_, (e, _))| *e.get_log_id()).or(purged);
        Ok(LogState { last_purged_log_id: purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        let mut state = inner.state.clone();
        state.vote = Some(*vote);
        write_state(&inner.dir, &state).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        inner.state = state;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().state.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        let mut state = inner.state.clone();
        state.committed = committed;
        write_state(&inner.dir, &state).map_err(storage_error)?;
        inner.state = state;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().state.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<Cfg>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<Cfg>> + Send,
        I::IntoIter: Send,
    {
        let res = self.inner.lock().append(entries.into_iter().collect());
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let copy = std::io::Error::new(e.kind(), e.to_string());
                callback.log_io_completed(Err(copy));
                Err(storage_error(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().truncate(log_id.index).map_err(storage_error)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.inner.lock().purge(log_id).map_err(storage_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry<Cfg> {
        let payload = crate::types::Command::Write { payload: vec![index as u8; 10], commit_ms: index };
        Entry { log_id: LogId::new(CommittedLeaderId::new(term, 1), index), payload: EntryPayload::Normal(payload) }
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().map(|rt| rt.block_on(f)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Appends, a truncation and a purge survive a reopen; a torn last record is cut off, and a
    /// flipped byte in an earlier record's body or in a length fails the open.
    #[test]
    fn entries_survive_a_reopen_torn_tails_are_cut_and_flips_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        run(async {
            let mut log = LogStore::open(&path).unwrap();
            {
                let mut inner = log.inner.lock();
                inner.append((1..=10).map(|i| entry(1, i)).collect()).unwrap();
                inner.truncate(8).unwrap();
                inner.append((8..=12).map(|i| entry(2, i)).collect()).unwrap();
            }
            log.save_vote(&Vote::new(2, 1)).await.unwrap();
            let got = log.try_get_log_entries(5..9).await.unwrap();
            assert_eq!(got, vec![entry(1, 5), entry(1, 6), entry(1, 7), entry(2, 8)]);
        });
        let log = LogStore::open(&path).unwrap();
        assert_eq!(log.indexes(), (1..=12).collect::<Vec<_>>());
        assert_eq!(log.inner.lock().entries[&9].0, entry(2, 9));
        assert_eq!(log.inner.lock().state.vote, Some(Vote::new(2, 1)));
        log.inner.lock().purge(LogId::new(CommittedLeaderId::new(1, 1), 7)).unwrap();
        drop(log);
        let log = LogStore::open(&path).unwrap();
        assert_eq!(log.indexes(), (8..=12).collect::<Vec<_>>());
        drop(log);

        let file = path.join("log");
        let whole = std::fs::read(&file).unwrap();
        std::fs::write(&file, &whole[..whole.len() - 3]).unwrap();
        let log = LogStore::open(&path).unwrap();
        assert_eq!(log.indexes(), (8..=11).collect::<Vec<_>>(), "the torn last entry is gone");
        drop(log);
        let mut flipped = std::fs::read(&file).unwrap();
        flipped[20] ^= 0x40;
        std::fs::write(&file, &flipped).unwrap();
        let e = LogStore::open(&path).err().unwrap();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        let mut length = std::fs::read(&file).unwrap();
        length[20] ^= 0x40;
        length[0] ^= 0x01;
        std::fs::write(&file, &length).unwrap();
        let e = LogStore::open(&path).err().unwrap();
        assert!(e.to_string().contains("length fails its checksum"), "{e}");
    }
}
