//! The request layer shared by `strata exec` (JSON lines) and the one-shot commands: it turns a
//! JSON request into engine calls and a JSON response.
//!
//! Each response is produced only after the operation finished, so with `--sync` a write's
//! response means the write is durable. A bad request is answered with an error and changes
//! nothing: writes are validated in full before anything is written, and a batch is one atomic
//! write. Named transactions (`begin` ... `commit`) hold their writes until the commit, and their
//! reads see them; a transaction still open when the session ends is rolled back.

use std::collections::HashMap;
use std::ops::Bound;

use serde_json::{json, Map, Value as Json};
use strata::scan::BatchIter;
use strata::scan::{batch_rows, ScanRequest};
use strata::{
    AsOf, Db, Engine, KeyRange, Projection, ReadOptions, Snapshot, Table, TableOptions, Transaction, TxnOptions, Value,
    WriteBatch, WriteOptions,
};

use crate::expr::{parse_agg, parse_where};
use crate::json::{key_from_json, object, row_from_json, to_json};
use crate::schema_sql::parse_schema;

/// An error answer: a stable kind and a message.
#[derive(Debug)]
pub struct CliError {
    /// Machine-readable kind.
    pub kind: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl CliError {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        CliError { kind, message: message.into() }
    }

    fn bad(message: impl Into<String>) -> Self {
        Self::new("bad_request", message)
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl From<strata::Error> for CliError {
    fn from(e: strata::Error) -> Self {
        CliError::new(e.kind(), e.to_string())
    }
}

/// The answer to an error of the SQL layer.
pub fn sql_error(e: strata_sql::SqlError) -> CliError {
    CliError::new("sql_error", format!("{} (SQLSTATE {})", e.message, e.kind.sqlstate()))
}

type Res<T> = Result<T, CliError>;

/// Where a read reads ([`Session::read_at`]).
enum ReadAt<'a> {
    Latest,
    Named(&'a Snapshot),
    Past(Snapshot),
}

impl ReadAt<'_> {
    fn opts(&self) -> ReadOptions<'_> {
        match self {
            ReadAt::Latest => ReadOptions::default(),
            ReadAt::Named(s) => ReadOptions { snapshot: Some(s) },
            ReadAt::Past(s) => ReadOptions { snapshot: Some(s) },
        }
    }
}

/// A past point to read at: a sequence number (digits) or an RFC 3339 time.
pub fn parse_as_of(s: &str) -> Result<AsOf, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(AsOf::Seq).map_err(|e| format!("sequence number `{s}`: {e}"));
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| AsOf::Time(t.into()))
        .map_err(|_| format!("`{s}` is neither a sequence number nor an RFC 3339 time such as 2026-11-24T20:00:00Z"))
}

/// A duration such as `500ms`, `90s`, `15m`, `12h` or `7d` (`0` alone is zero).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("`{s}` is not a duration such as 90s, 15m, 12h or 7d"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{s}`: the unit must be ms, s, m, h or d")),
    };
    n.checked_mul(ms).map(std::time::Duration::from_millis).ok_or_else(|| format!("`{s}` is too long"))
}

/// The fields each op takes besides `op`; `None` for an unknown op.
fn fields_of(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "create_table" => &["table", "schema", "layout", "aligned_compaction", "engine"],
        "drop_table" | "compact" => &["table"],
        "insert" => &["table", "row", "txn"],
        "update" => &["table", "key", "set", "txn"],
        "delete" => &["table", "key", "txn"],
        "batch" => &["ops", "txn"],
        "get" => &["table", "key", "columns", "snapshot", "as_of", "txn"],
        "multi_get" => &["table", "keys", "columns", "snapshot", "as_of", "txn"],
        "scan" => &["table", "from", "to", "columns", "where", "agg", "limit", "snapshot", "as_of", "txn"],
        "begin" => &["txn", "read_only"],
        "commit" | "rollback" => &["txn"],
        "snapshot" => &["name", "as_of"],
        "release" => &["name"],
        "flush" => &[],
        _ => return None,
    })
}

/// Refuses a field `op` does not take (a misspelled option must not silently mean the default).
fn check_fields(op: &str, req: &Map<String, Json>) -> Res<()> {
    let Some(known) = fields_of(op) else { return Err(CliError::bad(format!("unknown op `{op}`"))) };
    match req.keys().find(|k| *k != "op" && !known.contains(&k.as_str())) {
        Some(k) => Err(CliError::bad(format!("op `{op}` has no field `{k}` (it takes: {})", known.join(", ")))),
        None => Ok(()),
    }
}

fn field<'a>(req: &'a Map<String, Json>, name: &str) -> Res<&'a Json> {
    req.get(name).ok_or_else(|| CliError::bad(format!("missing field `{name}`")))
}

fn str_field<'a>(req: &'a Map<String, Json>, name: &str) -> Res<&'a str> {
    field(req, name)?.as_str().ok_or_else(|| CliError::bad(format!("field `{name}` must be a string")))
}

fn obj_field<'a>(req: &'a Map<String, Json>, name: &str) -> Res<&'a Map<String, Json>> {
    field(req, name)?.as_object().ok_or_else(|| CliError::bad(format!("field `{name}` must be an object")))
}

/// A database plus the named snapshots and transactions of one `exec` session.
pub struct Session {
    pub db: Db,
    snapshots: HashMap<String, Snapshot>,
    txns: HashMap<String, Transaction>,
    write: WriteOptions,
}

/// Scan parameters, as both `exec` and `strata scan` give them.
#[derive(Default)]
pub struct ScanArgs<'a> {
    pub from: Option<&'a Map<String, Json>>,
    pub to: Option<&'a Map<String, Json>>,
    pub columns: Option<Vec<String>>,
    pub filter: Option<&'a str>,
    pub aggs: Vec<String>,
    pub limit: Option<usize>,
}

/// The result of a scan: rows (column names + values) or aggregate values.
pub enum ScanOut {
    Rows(Vec<String>, Vec<Vec<Value>>),
    Aggs(Vec<(String, Json)>),
}

impl Session {
    pub fn new(db: Db, sync: bool) -> Self {
        Session { db, snapshots: HashMap::new(), txns: HashMap::new(), write: WriteOptions { sync } }
    }

    /// Handles one request line and returns the response object.
    pub fn handle_line(&mut self, line: &str) -> Json {
        let parsed: Result<Json, _> = serde_json::from_str(line);
        let out = match parsed {
            Err(e) => Err(CliError::bad(format!("not JSON: {e}"))),
            Ok(Json::Object(req)) => self.handle(&req),
            Ok(_) => Err(CliError::bad("a request must be a JSON object")),
        };
        match out {
            Ok(mut m) => {
                let mut o = Map::new();
                o.insert("ok".into(), Json::Bool(true));
                o.append(&mut m);
                Json::Object(o)
            }
            Err(e) => json!({"ok": false, "error": {"kind": e.kind, "message": e.message}}),
        }
    }

    /// Where a read reads: a named snapshot of the session, a snapshot as of a past point
    /// (`as_of`), or the newest data.
    fn read_at(&self, req: &Map<String, Json>) -> Res<ReadAt<'_>> {
        match (req.get("snapshot"), self.as_of(req)?) {
            (None | Some(Json::Null), None) => Ok(ReadAt::Latest),
            (None | Some(Json::Null), Some(s)) => Ok(ReadAt::Past(s)),
            (Some(Json::String(name)), None) => match self.snapshots.get(name) {
                Some(s) => Ok(ReadAt::Named(s)),
                None => Err(CliError::new("unknown_snapshot", format!("no snapshot named `{name}`"))),
            },
            (Some(Json::String(_)), Some(_)) => Err(CliError::bad("give `snapshot` or `as_of`, not both")),
            (Some(_), _) => Err(CliError::bad("field `snapshot` must be a string")),
        }
    }

    /// The snapshot as of the request's `as_of` (a sequence number or an RFC 3339 time), if any.
    fn as_of(&self, req: &Map<String, Json>) -> Res<Option<Snapshot>> {
        let at = match req.get("as_of") {
            None | Some(Json::Null) => return Ok(None),
            Some(Json::Number(n)) => match n.as_u64() {
                Some(seq) => AsOf::Seq(seq),
                None => return Err(CliError::bad("field `as_of` must be a sequence number or a time")),
            },
            Some(Json::String(s)) => parse_as_of(s).map_err(CliError::bad)?,
            Some(_) => return Err(CliError::bad("field `as_of` must be a sequence number or a time")),
        };
        Ok(Some(self.db.snapshot_as_of(at)?))
    }

    /// The open transaction a request names in `txn`, if it names one; it may not also name a
    /// snapshot or a past point to read at.
    fn txn_name<'r>(&self, req: &'r Map<String, Json>) -> Res<Option<&'r str>> {
        match req.get("txn") {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(name)) => {
                if !matches!(req.get("snapshot"), None | Some(Json::Null))
                    || !matches!(req.get("as_of"), None | Some(Json::Null))
                {
                    return Err(CliError::bad(
                        "a transaction reads at its own snapshot: give `txn` or `snapshot`/`as_of`",
                    ));
                }
                if !self.txns.contains_key(name) {
                    return Err(CliError::new("unknown_txn", format!("no open transaction named `{name}`")));
                }
                Ok(Some(name))
            }
            Some(_) => Err(CliError::bad("field `txn` must be a string")),
        }
    }

    fn txn(&mut self, name: &str) -> Res<&mut Transaction> {
        self.txns
            .get_mut(name)
            .ok_or_else(|| CliError::new("unknown_txn", format!("no open transaction named `{name}`")))
    }

    fn handle(&mut self, req: &Map<String, Json>) -> Res<Map<String, Json>> {
        let op = str_field(req, "op")?;
        check_fields(op, req)?;
        match op {
            "begin" => {
                let name = str_field(req, "txn")?;
                if self.txns.contains_key(name) {
                    return Err(CliError::new("txn_exists", format!("transaction `{name}` is already open")));
                }
                let read_only = match req.get("read_only") {
                    None | Some(Json::Null) => false,
                    Some(Json::Bool(b)) => *b,
                    Some(_) => return Err(CliError::bad("field `read_only` must be true or false")),
                };
                let tx = self.db.begin(&TxnOptions { read_only, ..Default::default() })?;
                let seq = tx.snapshot_seq();
                self.txns.insert(name.to_owned(), tx);
                Ok(answer("seq", Json::from(seq)))
            }
            "commit" => {
                let name = str_field(req, "txn")?;
                // Ended either way: a commit that fails (a conflict) wrote nothing.
                let tx = self
                    .txns
                    .remove(name)
                    .ok_or_else(|| CliError::new("unknown_txn", format!("no open transaction named `{name}`")))?;
                tx.commit(&self.write)?;
                Ok(Map::new())
            }
            "rollback" => {
                let name = str_field(req, "txn")?;
                self.txns
                    .remove(name)
                    .ok_or_else(|| CliError::new("unknown_txn", format!("no open transaction named `{name}`")))?
                    .rollback();
                Ok(Map::new())
            }
            "create_table" => {
                let name = str_field(req, "table")?;
                let schema = parse_schema(str_field(req, "schema")?).map_err(|m| CliError::new("invalid_schema", m))?;
                let options = match req.get("layout") {
                    None | Some(Json::Null) => TableOptions::default(),
                    Some(Json::String(spec)) => TableOptions::with_layout(spec.clone()),
                    Some(_) => return Err(CliError::new("bad_request", "`layout` must be a string")),
                };
                let options = match req.get("aligned_compaction") {
                    None | Some(Json::Null) => options,
                    Some(Json::Bool(on)) => options.aligned(*on),
                    Some(_) => return Err(CliError::new("bad_request", "`aligned_compaction` must be true or false")),
                };
                let options = match req.get("engine") {
                    None | Some(Json::Null) => options,
                    Some(Json::String(e)) => match Engine::from_name(e) {
                        Some(e) => options.with_engine(e),
                        None => {
                            return Err(CliError::new(
                                "bad_request",
                                format!("unknown engine `{e}`: `lsm` or `lineage`"),
                            ))
                        }
                    },
                    Some(_) => return Err(CliError::new("bad_request", "`engine` must be a string")),
                };
                self.db.create_table(name, schema, options)?;
                Ok(Map::new())
            }
            "drop_table" => {
                self.db.drop_table(str_field(req, "table")?)?;
                Ok(Map::new())
            }
            "insert" | "update" | "delete" | "batch" => {
                let mut b = WriteBatch::new();
                if op == "batch" {
                    let ops =
                        field(req, "ops")?.as_array().ok_or_else(|| CliError::bad("field `ops` must be an array"))?;
                    for (i, o) in ops.iter().enumerate() {
                        let o = o.as_object().ok_or_else(|| CliError::bad(format!("ops[{i}] must be an object")))?;
                        let inner = str_field(o, "op")?;
                        if !matches!(inner, "insert" | "update" | "delete") {
                            return Err(CliError::bad(format!(
                                "ops[{i}]: a batch holds insert, update and delete only"
                            )));
                        }
                        check_fields(inner, o).map_err(|e| CliError::bad(format!("ops[{i}]: {}", e.message)))?;
                        if o.contains_key("txn") {
                            return Err(CliError::bad(format!(
                                "ops[{i}]: the batch names the transaction (`txn` on the batch), not its ops"
                            )));
                        }
                        self.add_write(&mut b, inner, o)
                            .map_err(|e| CliError::new(e.kind, format!("ops[{i}]: {}", e.message)))?;
                    }
                } else {
                    self.add_write(&mut b, op, req)?;
                }
                match self.txn_name(req)? {
                    // The batch's operations join the transaction together or not at all: the
                    // transaction is left as it was when one is refused.
                    Some(name) => self.txn(name)?.write_batch(b)?,
                    None => self.db.write(b, &self.write)?,
                }
                Ok(Map::new())
            }
            "get" => {
                let t = self.db.table(str_field(req, "table")?)?;
                let key = key_from_json(t.schema(), obj_field(req, "key")?, false)
                    .map_err(|m| CliError::new("type_mismatch", m))?;
                let (names, proj) = projection(&t, columns_field(req)?)?;
                let row = match self.txn_name(req)? {
                    Some(name) => self.txn(name)?.get(&t, &key, &proj)?,
                    None => t.get(&key, &proj, &self.read_at(req)?.opts())?,
                };
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                Ok(answer("row", row.map_or(Json::Null, |r| object(&names, &r))))
            }
            "multi_get" => {
                let t = self.db.table(str_field(req, "table")?)?;
                let Some(Json::Array(items)) = req.get("keys") else {
                    return Err(CliError::bad("`keys` must be an array of key objects"));
                };
                let mut keys = Vec::with_capacity(items.len());
                for item in items {
                    let Json::Object(obj) = item else {
                        return Err(CliError::bad("`keys` must be an array of key objects"));
                    };
                    keys.push(key_from_json(t.schema(), obj, false).map_err(|m| CliError::new("type_mismatch", m))?);
                }
                let (names, proj) = projection(&t, columns_field(req)?)?;
                let rows = match self.txn_name(req)? {
                    Some(name) => {
                        let tx = self.txn(name)?;
                        keys.iter().map(|k| tx.get(&t, k, &proj)).collect::<Result<Vec<_>, _>>()?
                    }
                    None => t.multi_get(&keys, &proj, &self.read_at(req)?.opts())?,
                };
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let rows = rows.into_iter().map(|r| r.map_or(Json::Null, |r| object(&names, &r))).collect();
                Ok(answer("rows", Json::Array(rows)))
            }
            "scan" => {
                let args = ScanArgs {
                    from: req
                        .get("from")
                        .map(|f| f.as_object().ok_or_else(|| CliError::bad("field `from` must be an object")))
                        .transpose()?,
                    to: req
                        .get("to")
                        .map(|f| f.as_object().ok_or_else(|| CliError::bad("field `to` must be an object")))
                        .transpose()?,
                    columns: columns_field(req)?,
                    filter: req
                        .get("where")
                        .map(|w| w.as_str().ok_or_else(|| CliError::bad("field `where` must be a string")))
                        .transpose()?,
                    aggs: match req.get("agg") {
                        None => Vec::new(),
                        Some(a) => a
                            .as_array()
                            .ok_or_else(|| CliError::bad("field `agg` must be an array"))?
                            .iter()
                            .map(|x| {
                                x.as_str()
                                    .map(str::to_owned)
                                    .ok_or_else(|| CliError::bad("`agg` entries must be strings"))
                            })
                            .collect::<Res<_>>()?,
                    },
                    limit: match req.get("limit") {
                        None => None,
                        Some(l) => Some(
                            l.as_u64().ok_or_else(|| CliError::bad("field `limit` must be a non-negative integer"))?
                                as usize,
                        ),
                    },
                };
                let t = self.db.table(str_field(req, "table")?)?;
                let out = match self.txn_name(req)? {
                    Some(name) => {
                        let tx = self.txn(name)?;
                        scan_with(&t, &args, |r| tx.scan_batches(&t, r))?
                    }
                    None => scan(&t, &args, &self.read_at(req)?.opts())?,
                };
                match out {
                    ScanOut::Rows(names, rows) => {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        Ok(answer("rows", rows.iter().map(|r| object(&names, r)).collect()))
                    }
                    ScanOut::Aggs(a) => Ok(answer("agg", Json::Object(a.into_iter().collect()))),
                }
            }
            "snapshot" => {
                let name = str_field(req, "name")?.to_owned();
                let s = match self.as_of(req)? {
                    Some(s) => s,
                    None => self.db.snapshot(),
                };
                let seq = s.seq();
                self.snapshots.insert(name, s);
                Ok(answer("seq", Json::from(seq)))
            }
            "release" => {
                let name = str_field(req, "name")?;
                self.snapshots
                    .remove(name)
                    .ok_or_else(|| CliError::new("unknown_snapshot", format!("no snapshot named `{name}`")))?;
                Ok(Map::new())
            }
            "flush" => {
                self.db.flush()?;
                Ok(Map::new())
            }
            "compact" => {
                self.db.compact_range(str_field(req, "table")?, &KeyRange::all())?;
                Ok(Map::new())
            }
            other => Err(CliError::bad(format!("unknown op `{other}`"))),
        }
    }

    fn add_write(&self, b: &mut WriteBatch, op: &str, req: &Map<String, Json>) -> Res<()> {
        let t = self.db.table(str_field(req, "table")?)?;
        strata_sql::indexes::refuse_writes_outside_sql(&self.db, &t).map_err(sql_error)?;
        let mismatch = |m: String| CliError::new("type_mismatch", m);
        match op {
            "insert" => {
                let row = row_from_json(t.schema(), obj_field(req, "row")?).map_err(mismatch)?;
                b.insert(&t, &row)?;
            }
            "update" => {
                let key = key_from_json(t.schema(), obj_field(req, "key")?, false).map_err(mismatch)?;
                let set = obj_field(req, "set")?;
                let mut pairs = Vec::with_capacity(set.len());
                for (name, j) in set {
                    let c = t.schema().column_index(name).ok_or_else(|| {
                        CliError::new("unknown_column", format!("table `{}` has no column `{name}`", t.name()))
                    })?;
                    let v = crate::json::from_json(t.schema().columns()[c].ty, j)
                        .map_err(|m| mismatch(format!("column `{name}`: {m}")))?;
                    pairs.push((name.as_str(), v));
                }
                b.update(&t, &key, &pairs)?;
            }
            _ => {
                let key = key_from_json(t.schema(), obj_field(req, "key")?, false).map_err(mismatch)?;
                b.delete(&t, &key)?;
            }
        }
        Ok(())
    }
}

/// A response body with one field.
fn answer(key: &str, value: Json) -> Map<String, Json> {
    let mut m = Map::new();
    m.insert(key.to_owned(), value);
    m
}

fn columns_field(req: &Map<String, Json>) -> Res<Option<Vec<String>>> {
    match req.get("columns") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_owned).ok_or_else(|| CliError::bad("`columns` entries must be strings")))
            .collect::<Res<Vec<_>>>()
            .map(Some),
        Some(_) => Err(CliError::bad("field `columns` must be an array")),
    }
}

/// Output names and the projection for optional column names (all columns by default).
pub fn projection(t: &Table, columns: Option<Vec<String>>) -> Res<(Vec<String>, Projection)> {
    match columns {
        None => Ok((t.schema().columns().iter().map(|c| c.name.clone()).collect(), Projection::All)),
        Some(c) => {
            let refs: Vec<&str> = c.iter().map(String::as_str).collect();
            let p = t.projection(&refs)?;
            Ok((c, p))
        }
    }
}

/// Runs a scan with an optional predicate, aggregates and limit through the engine's scan path
/// (filters, projections and aggregates evaluated in the engine, on Arrow batches).
pub fn scan(t: &Table, a: &ScanArgs<'_>, ro: &ReadOptions<'_>) -> Res<ScanOut> {
    scan_with(t, a, |req| t.scan_batches(req, ro))
}

/// [`scan`], the request answered by `run` (a transaction's scan, for one).
fn scan_with(t: &Table, a: &ScanArgs<'_>, run: impl FnOnce(&ScanRequest) -> strata::Result<BatchIter>) -> Res<ScanOut> {
    let schema = t.schema();
    let key = |o: Option<&Map<String, Json>>| -> Res<Option<Vec<Value>>> {
        o.map(|m| key_from_json(schema, m, true).map_err(|e| CliError::new("type_mismatch", e))).transpose()
    };
    let range = KeyRange {
        start: key(a.from)?.map_or(Bound::Unbounded, Bound::Included),
        end: key(a.to)?.map_or(Bound::Unbounded, Bound::Excluded),
    };
    let mut req = ScanRequest::new().with_range(range);
    if let Some(w) = a.filter {
        req = req.with_filter(parse_where(w, schema).map_err(|m| CliError::new("invalid_where", m))?);
    }
    let mut labels = Vec::with_capacity(a.aggs.len());
    for x in &a.aggs {
        let (label, agg) = parse_agg(x, schema).map_err(|m| CliError::new("invalid_agg", m))?;
        labels.push(label);
        req = req.with_aggregate(agg);
    }
    let names: Vec<String> = match &a.columns {
        Some(c) => c.clone(),
        None => schema.columns().iter().map(|c| c.name.clone()).collect(),
    };
    req.columns = Some(names.clone());
    req.limit = a.limit;
    let mut rows = Vec::new();
    for b in run(&req)? {
        rows.extend(batch_rows(&b?));
    }
    if labels.is_empty() {
        Ok(ScanOut::Rows(names, rows))
    } else {
        let values = rows.into_iter().next().unwrap_or_default();
        Ok(ScanOut::Aggs(labels.into_iter().zip(values.iter().map(to_json)).collect()))
    }
}
