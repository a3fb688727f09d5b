//! Helpers shared by the integration tests: random values, a BTreeMap model of a table, and
//! option sets that force many flushes and compactions on small data.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::Rng;
use strata::vfs::Fs;
use strata::{Column, ColumnType, Options, Schema, Value};

/// A model key: key columns as sortable parts (tuples order like the engine's keys).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    I(i64),
    S(String),
}

pub type MKey = Vec<Part>;

pub fn part_of(v: &Value) -> Part {
    match v {
        Value::BigInt(x) => Part::I(*x),
        Value::Int(x) => Part::I(i64::from(*x)),
        Value::Text(s) => Part::S(s.clone()),
        other => panic!("model keys support BIGINT, INT and TEXT, got {other:?}"),
    }
}

/// Options that make a few thousand rows span several levels.
pub fn tiny_options(fs: Arc<dyn Fs>) -> Options {
    Options {
        memtable_size: 16 << 10,
        max_immutable_memtables: 2,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 6,
        l0_stop_trigger: 10,
        level_size_ratio: 3,
        l1_max_bytes: 24 << 10,
        num_levels: 6,
        target_file_size: 8 << 10,
        block_size: 512,
        block_cache_size: 256 << 10,
        compaction_threads: 2,
        lineage_range: 64,
        lineage_merge_threshold: 16,
        lineage_checkpoint_bytes: 32 << 10,
        fs,
        ..Options::default()
    }
}

/// A slow tier for tests: a little positioning time per random read, one operation at a time
/// (a disk in miniature, so tests stay quick but reads on it queue and cost more).
pub fn slow_device() -> strata::vfs::DeviceProfile {
    let read_latency = std::time::Duration::from_micros(20);
    strata::vfs::DeviceProfile { read_latency, bandwidth: 400_000_000, channels: 1 }
}

/// The tables the randomized tests use: a BIGINT key with every value type, and a composite
/// (TEXT, INT) key.
pub fn schemas() -> Vec<(&'static str, Schema)> {
    let wide = Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::new("i", ColumnType::Int),
            Column::not_null("d", ColumnType::Double),
            Column::new("s", ColumnType::Text),
            Column::new("small", ColumnType::SmallInt),
            Column::new("tiny", ColumnType::TinyInt),
            Column::new("r", ColumnType::Real),
            Column::new("flag", ColumnType::Boolean),
            Column::new("blob", ColumnType::Bytea),
            Column::new("day", ColumnType::Date),
            Column::new("at", ColumnType::Timestamp),
        ],
        &["id"],
    )
    .unwrap();
    let composite = Schema::new(
        vec![
            Column::new("v", ColumnType::BigInt),
            Column::new("name", ColumnType::Text),
            Column::new("n", ColumnType::Int),
            Column::new("w", ColumnType::Text),
            Column::new("since", ColumnType::TimestampTz),
        ],
        &["name", "n"],
    )
    .unwrap();
    vec![("wide", wide), ("composite", composite)]
}

pub fn random_value(rng: &mut StdRng, c: &Column) -> Value {
    if c.nullable && rng.gen_ratio(1, 8) {
        return Value::Null;
    }
    match c.ty {
        ColumnType::BigInt => Value::BigInt(rng.gen_range(-1_000_000..1_000_000)),
        ColumnType::Int => Value::Int(rng.gen()),
        ColumnType::SmallInt => Value::SmallInt(rng.gen()),
        ColumnType::TinyInt => Value::TinyInt(rng.gen()),
        ColumnType::Double => {
            Value::Double([0.0, -0.5, 1e300, f64::MIN_POSITIVE, rng.gen::<f64>() * 1000.0][rng.gen_range(0..5)])
        }
        ColumnType::Real => Value::Real(rng.gen::<f32>() - 0.5),
        ColumnType::Boolean => Value::Boolean(rng.gen()),
        ColumnType::Text => {
            let n = if rng.gen_ratio(1, 10) { rng.gen_range(60..300) } else { rng.gen_range(0..12) };
            Value::Text((0..n).map(|_| char::from(b'a' + rng.gen_range(0..26u8))).collect())
        }
        ColumnType::Bytea => Value::Bytea((0..rng.gen_range(0..16)).map(|_| rng.gen()).collect()),
        ColumnType::Date => Value::Date(rng.gen_range(-100_000..100_000)),
        ColumnType::Timestamp => Value::Timestamp(rng.gen()),
        ColumnType::TimestampTz => Value::TimestampTz(rng.gen_range(-1 << 50..1 << 50)),
    }
}

/// A random key value for a key column, from a small domain so keys repeat.
pub fn random_key_value(rng: &mut StdRng, c: &Column, domain: i64) -> Value {
    match c.ty {
        ColumnType::BigInt => Value::BigInt(rng.gen_range(0..domain) * 7 - domain),
        ColumnType::Int => Value::Int(rng.gen_range(0..4)),
        ColumnType::Text => Value::Text(format!("k{}", rng.gen_range(0..domain / 4 + 1))),
        other => panic!("unsupported key type {other:?}"),
    }
}

/// One table's contents: model key → full row in schema order.
#[derive(Debug, Clone, Default)]
pub struct TableModel {
    pub rows: BTreeMap<MKey, Vec<Value>>,
}

impl TableModel {
    pub fn key_of(schema: &Schema, row: &[Value]) -> MKey {
        schema.primary_key().iter().map(|&c| part_of(&row[c])).collect()
    }

    pub fn insert(&mut self, schema: &Schema, row: Vec<Value>) {
        self.rows.insert(Self::key_of(schema, &row), row);
    }

    pub fn update(&mut self, schema: &Schema, key: &[Value], set: &[(String, Value)]) {
        let k: MKey = key.iter().map(part_of).collect();
        if let Some(row) = self.rows.get_mut(&k) {
            for (name, v) in set {
                let c = schema.column_index(name).unwrap();
                row[c] = v.clone();
            }
        }
    }

    pub fn delete(&mut self, key: &[Value]) {
        let k: MKey = key.iter().map(part_of).collect();
        self.rows.remove(&k);
    }

    pub fn get(&self, key: &[Value]) -> Option<&Vec<Value>> {
        let k: MKey = key.iter().map(part_of).collect();
        self.rows.get(&k)
    }
}

/// Projects a full row onto schema column indices.
pub fn project(row: &[Value], cols: &[usize]) -> Vec<Value> {
    cols.iter().map(|&c| row[c].clone()).collect()
}

/// Seeds for randomized tests: `STRATA_SEEDS=1,2,3` overrides the given defaults.
pub fn seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var("STRATA_SEEDS") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

/// Runs `f(seed)` and, if it panics, fails naming the seed so the run can be repeated.
pub fn with_seed(seed: u64, f: impl FnOnce(u64) + std::panic::UnwindSafe) {
    if let Err(e) = std::panic::catch_unwind(move || f(seed)) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("failed with seed {seed} (rerun with STRATA_SEEDS={seed}): {msg}");
    }
}

/// The layouts the randomized tests run under.
pub const LAYOUTS: &[&str] = &["row", "column", "cg3", "cg6", "lifecycle"];

/// Layout text of kind `kind` for `schema` (`None` for the row layout): `column`; `cgN`, groups
/// of N neighbouring columns from Level-1 down; `lifecycle`, two groups at Level-1, four at
/// Level-2 (each inside one of Level-1's) and one column per group below.
pub fn layout_spec(kind: &str, schema: &Schema) -> Option<String> {
    let names: Vec<String> = schema.value_columns().iter().map(|&c| schema.columns()[c].name.clone()).collect();
    let text =
        |groups: Vec<&[String]>| groups.iter().map(|g| format!("({})", g.join(","))).collect::<Vec<_>>().join(" ");
    // `k` nearly equal neighbouring parts; parts of 2k nest inside parts of k.
    let parts = |k: usize| -> Vec<&[String]> {
        let n = names.len();
        let k = k.clamp(1, n.max(1));
        (0..k).map(|i| &names[i * n / k..(i + 1) * n / k]).collect()
    };
    match kind {
        "row" => None,
        "column" => Some("L1-: column".into()),
        "lifecycle" => Some(format!("L0: row; L1: {}; L2: {}; L3-: column", text(parts(2)), text(parts(4)))),
        cg => {
            let size: usize = cg.strip_prefix("cg").and_then(|s| s.parse().ok()).expect("cgN");
            Some(format!("L1-: {}", text(names.chunks(size).collect())))
        }
    }
}
