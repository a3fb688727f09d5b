//! Workload traces: the per-level events the workload statistics count ([`super::workload`]),
//! appended to a file as they happen, so a workload seen by one process can be advised on by
//! another (`strata advise --trace`). A trace records what each level served (which level a
//! point read found its key in, which files a scan read), so it describes the workload on the
//! tree it was recorded on. Text, one event per line; see `docs/format/trace.md`.
//!
//! Which tables are traced is kept in the database directory (`TRACES`), so tracing goes on
//! across processes until it is stopped.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use super::workload::{At, Op, Workload};
use crate::error::{Error, Result};
use crate::vfs::Fs;

/// The format version written in a trace's first line.
pub(crate) const TRACE_VERSION: u32 = 1;

/// The file in the database directory naming the traced tables.
pub(crate) const TRACES_FILE: &str = "TRACES";

/// An open trace being appended to.
#[derive(Debug)]
pub(crate) struct TraceWriter {
    out: std::io::BufWriter<std::fs::File>,
    pub(crate) path: PathBuf,
}

fn bad(path: &Path, line: usize, msg: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("{}:{line}: not a strata trace: {}", path.display(), msg.into()))
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::InvalidArgument(format!("{}: {e}", path.display()))
}

impl TraceWriter {
    /// Opens `path` to append events of table `name` with `nvals` value columns: a new or
    /// empty file gets the header; an existing trace must be of the same table and shape.
    pub(crate) fn open(path: &Path, name: &str, nvals: usize) -> Result<TraceWriter> {
        let file = std::fs::OpenOptions::new().create(true).append(true).read(true).open(path);
        let file = file.map_err(|e| io(path, e))?;
        let len = file.metadata().map_err(|e| io(path, e))?.len();
        if len > 0 {
            let (table, n) = header(path, &mut BufReader::new(&file).lines())?;
            if table != name || n != nvals {
                return Err(Error::InvalidArgument(format!(
                    "{} traces table {table} of {n} value columns, not {name} of {nvals}",
                    path.display()
                )));
            }
        }
        let mut w = TraceWriter { out: std::io::BufWriter::new(file), path: path.to_owned() };
        if len == 0 {
            writeln!(w.out, "strata-trace\t{TRACE_VERSION}\t{nvals}\t{name}").map_err(|e| io(path, e))?;
        }
        Ok(w)
    }

    /// Appends `n` whole rows written.
    pub(crate) fn inserts(&mut self, n: u64) -> std::io::Result<()> {
        writeln!(self.out, "i\t{n}")
    }

    /// Appends one operation of type `op` served at `at` over value columns `cols`.
    pub(crate) fn op(&mut self, at: At, op: Op, cols: &[usize], entries: u64) -> std::io::Result<()> {
        let tag = match op {
            Op::PointRead => 'p',
            Op::Scan => 's',
            Op::Update => 'u',
        };
        match at {
            At::Memtable => write!(self.out, "{tag}\tm\t")?,
            At::Level(l) => write!(self.out, "{tag}\t{l}\t")?,
        }
        for (i, c) in cols.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            write!(self.out, "{c}")?;
        }
        if op == Op::Scan {
            write!(self.out, "\t{entries}")?;
        }
        self.out.write_all(b"\n")
    }

    /// Writes out what is buffered.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| io(&self.path, e))
    }
}

/// The table name and value-column count of a trace's header line.
fn header(path: &Path, lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Result<(String, usize)> {
    let first = lines.next().ok_or_else(|| bad(path, 1, "empty"))?.map_err(|e| io(path, e))?;
    let mut f = first.splitn(4, '\t');
    if f.next() != Some("strata-trace") {
        return Err(bad(path, 1, "no `strata-trace` header"));
    }
    let version: u32 = f.next().and_then(|v| v.parse().ok()).ok_or_else(|| bad(path, 1, "no format version"))?;
    if version != TRACE_VERSION {
        return Err(bad(path, 1, format!("format version {version}; this build reads {TRACE_VERSION}")));
    }
    let nvals = f.next().and_then(|v| v.parse().ok()).ok_or_else(|| bad(path, 1, "no column count"))?;
    let name = f.next().ok_or_else(|| bad(path, 1, "no table name"))?;
    Ok((name.to_owned(), nvals))
}

/// Reads the trace at `path` of table `name` (with `nvals` value columns) into fresh workload
/// counters. A last line cut short (the trace of a process that stopped mid-write) is left
/// out; any other malformed line is an error naming it.
pub(crate) fn load(path: &Path, name: &str, nvals: usize) -> Result<Workload> {
    let file = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let mut lines = BufReader::new(file).lines().peekable();
    let (table, n) = header(path, &mut lines)?;
    if table != name || n != nvals {
        return Err(Error::InvalidArgument(format!(
            "{} traces table {table} of {n} value columns, not {name} of {nvals}",
            path.display()
        )));
    }
    let w = Workload::new(nvals);
    let mut lineno = 1;
    while let Some(line) = lines.next() {
        lineno += 1;
        let line = line.map_err(|e| io(path, e))?;
        let last = lines.peek().is_none();
        match event(&line, nvals) {
            Some(Event::Inserts(k)) => w.record_inserts(k),
            Some(Event::Op(at, op, cols, entries)) => w.record(at, op, cols.into_iter(), entries),
            None if last => {}
            None => return Err(bad(path, lineno, format!("bad event `{line}`"))),
        }
    }
    Ok(w)
}

enum Event {
    Inserts(u64),
    Op(At, Op, Vec<usize>, u64),
}

fn event(line: &str, nvals: usize) -> Option<Event> {
    let f: Vec<&str> = line.split('\t').collect();
    let op = match *f.first()? {
        "i" if f.len() == 2 => return f[1].parse().ok().map(Event::Inserts),
        "p" => Op::PointRead,
        "s" => Op::Scan,
        "u" => Op::Update,
        _ => return None,
    };
    if f.len() != if op == Op::Scan { 4 } else { 3 } {
        return None;
    }
    let at = match f[1] {
        "m" => At::Memtable,
        l => At::Level(l.parse().ok()?),
    };
    let mut cols = Vec::new();
    for c in f[2].split(',').filter(|c| !c.is_empty()) {
        let c: usize = c.parse().ok()?;
        if c >= nvals || cols.last().is_some_and(|&p| p >= c) {
            return None;
        }
        cols.push(c);
    }
    let entries = if op == Op::Scan { f[3].parse().ok()? } else { 0 };
    Some(Event::Op(at, op, cols, entries))
}

/// The traced tables recorded in database directory `dir`: (table id, trace path).
pub(crate) fn read_traces(fs: &dyn Fs, dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
    let path = dir.join(TRACES_FILE);
    if !fs.exists(&path) {
        return Ok(Vec::new());
    }
    let text = fs.read_all(&path)?;
    let text = String::from_utf8_lossy(&text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let parsed = line.split_once('\t').and_then(|(id, p)| Some((id.parse().ok()?, PathBuf::from(p))));
        out.push(parsed.ok_or_else(|| Error::corruption(&path, i as u64, format!("bad line `{line}`")))?);
    }
    Ok(out)
}

/// Records `traces` as the traced tables of `dir`, atomically (none: the file is removed).
pub(crate) fn write_traces(fs: &dyn Fs, dir: &Path, traces: &[(u32, PathBuf)]) -> Result<()> {
    let path = dir.join(TRACES_FILE);
    if traces.is_empty() {
        if fs.exists(&path) {
            fs.remove(&path)?;
            fs.sync_dir(dir)?;
        }
        return Ok(());
    }
    let mut text = String::new();
    for (id, p) in traces {
        text.push_str(&format!("{id}\t{}\n", p.display()));
    }
    let tmp = dir.join("TRACES.tmp");
    let mut f = fs.create(&tmp)?;
    f.append(text.as_bytes())?;
    f.sync()?;
    drop(f);
    fs.rename(&tmp, &path)?;
    fs.sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events written are the events read back: the counters a trace loads into equal those
    /// counted live; a cut-off last line is left out, a bad line elsewhere names its line.
    #[test]
    fn a_trace_loads_into_the_counters_it_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let live = Workload::new(4);
        let mut w = TraceWriter::open(&path, "orders", 4).unwrap();
        let events: Vec<(At, Op, Vec<usize>, u64)> = vec![
            (At::Memtable, Op::PointRead, vec![0, 1, 2, 3], 0),
            (At::Level(1), Op::Scan, vec![2], 500),
            (At::Level(3), Op::Scan, vec![2, 3], 7000),
            (At::Level(2), Op::Update, vec![1], 0),
            (At::Level(2), Op::PointRead, vec![], 0),
        ];
        for (at, op, cols, entries) in &events {
            w.op(*at, *op, cols, *entries).unwrap();
            live.record(*at, *op, cols.iter().copied(), *entries);
        }
        w.inserts(12).unwrap();
        live.record_inserts(12);
        w.flush().unwrap();
        drop(w);
        // Appending to the trace of another table is refused.
        assert!(TraceWriter::open(&path, "lineitem", 4).is_err());
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"s\t2\t1,").unwrap();
        let loaded = load(&path, "orders", 4).unwrap();
        assert_eq!(loaded.inserts(), live.inserts());
        for at in [At::Memtable, At::Level(1), At::Level(2), At::Level(3)] {
            for op in [Op::PointRead, Op::Scan, Op::Update] {
                assert_eq!(loaded.shapes(at, op), live.shapes(at, op), "{at:?} {op:?}");
                assert_eq!(loaded.read(at, op), live.read(at, op), "{at:?} {op:?}");
            }
        }
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"0\np\t1\t9\n").unwrap();
        let e = load(&path, "orders", 4).expect_err("a bad line loaded");
        assert!(e.to_string().contains(":8:"), "{e}");
        assert!(load(&path, "other", 4).is_err());
    }
}
