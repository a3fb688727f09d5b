//! TPC-H through a strata cluster ([`crate::cluster::Cluster`]): every table split by its first
//! key column into one shard per node, each shard replicated on every node (3 × 3 with three
//! nodes), loaded through the nodes; the queries run with the first node coordinating, one scan
//! task per shard on a node holding it.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use strata::{ColumnType, Value};
use strata_cluster::types::{to_wire, NodeRequest, NodeResponse, WireValue};

use super::load::{self, TpchTable, TABLES};
use crate::cluster::Cluster;

/// Rows per write sent to a shard (one Raft entry each).
const ROWS_PER_WRITE: usize = 2_000;

/// About the largest first-key value of `table` at scale factor `sf` (order keys are sparse:
/// dbgen uses 8 of every 32).
fn key_span(table: &TpchTable, sf: f64) -> i64 {
    let scaled = |n: f64| ((n * sf).ceil() as i64).max(1);
    match table.name {
        "lineitem" | "orders" => scaled(6_000_000.0),
        "partsupp" | "part" => scaled(200_000.0),
        "customer" => scaled(150_000.0),
        "supplier" => scaled(10_000.0),
        "nation" => 25,
        _ => 5,
    }
}

fn key_value(ty: ColumnType, v: i64) -> Result<Value, String> {
    match ty {
        ColumnType::BigInt => Ok(Value::BigInt(v)),
        ColumnType::Int => i32::try_from(v).map(Value::Int).map_err(|e| e.to_string()),
        other => Err(format!("tpch: a first key column of type {other:?}")),
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::BigInt(x) => Some(*x),
        Value::Int(x) => Some(i64::from(*x)),
        _ => None,
    }
}

/// Creates the eight tables in `cluster`, each in one shard per node replicated on every node,
/// and loads them at scale factor `sf` through the nodes in turn; returns the rows written.
pub(crate) fn load(cluster: &Cluster, sf: f64, threads: usize, progress: &AtomicU64) -> Result<u64, String> {
    let shards = cluster.len() as i64;
    let mut splits: BTreeMap<&str, (ColumnType, Vec<i64>)> = BTreeMap::new();
    for t in &TABLES {
        let schema = t.strata_schema()?;
        let ty = schema.columns()[schema.primary_key()[0]].ty;
        let span = key_span(t, sf);
        let points: Vec<i64> = (1..shards).map(|i| span * i / shards).filter(|p| *p > 0).collect();
        let wire = points.iter().map(|p| key_value(ty, *p).map(|v| WireValue::from(&v))).collect::<Result<_, _>>()?;
        let create = NodeRequest::CreateTable {
            name: t.name.into(),
            schema: schema.to_bytes(),
            splits: wire,
            replicas: cluster.len(),
        };
        match cluster.ask(0, create) {
            NodeResponse::Done => {}
            other => return Err(format!("cluster: creating {}: {other:?}", t.name)),
        }
        splits.insert(t.name, (ty, points));
    }
    let written = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    load::generate(sf, threads, progress, &|t, rows| {
        let schema = t.strata_schema()?;
        let k = schema.primary_key()[0];
        let (_, points) = splits.get(t.name).ok_or("cluster: a table without splits")?;
        // Rows by shard, each shard's sent in writes of ROWS_PER_WRITE.
        let mut by_shard: Vec<Vec<Vec<WireValue>>> = vec![Vec::new(); points.len() + 1];
        for row in &rows {
            let key = row.get(k).and_then(as_i64).ok_or("cluster: a row without its key")?;
            by_shard[points.iter().take_while(|p| key >= **p).count()].push(to_wire(row));
        }
        for part in by_shard.iter().flat_map(|rows| rows.chunks(ROWS_PER_WRITE)) {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize;
            match cluster.ask(i, NodeRequest::Insert { table: t.name.into(), rows: part.to_vec() }) {
                NodeResponse::Written { .. } => {}
                other => return Err(format!("cluster: writing {}: {other:?}", t.name)),
            }
            written.fetch_add(part.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    })?;
    Ok(written.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tpch::{batches_text, check, parse_queries, QUERIES};

    /// The 22 queries at scale factor 0.01 through three nodes (every table in 3 shards × 3
    /// replicas) answer what strata-sql answers over one database holding the same rows; each
    /// query's plan reads the shards in tasks of one shard each.
    #[test]
    fn the_22_queries_answer_through_a_cluster_as_on_one_database() {
        let sf = 0.01;
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(strata::Db::open(dir.path().join("single"), strata::Options::default()).unwrap());
        let progress = AtomicU64::new(0);
        let loaded = load::load_strata(&db, sf, 2, &strata::TableOptions::default(), &progress, true).unwrap();
        let single = strata_sql::SqlEngine::with_partitions(db, 2).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();

        let cluster = Cluster::start(&dir.path().join("cluster"), 3, 2).unwrap();
        let rows = load(&cluster, sf, 2, &AtomicU64::new(0)).unwrap();
        assert_eq!(rows, loaded, "rows loaded into the cluster and into one database");
        let mut differ = Vec::new();
        for (n, q) in parse_queries(QUERIES) {
            let want = match rt.block_on(single.execute(&q)).unwrap().pop() {
                Some(strata_sql::Output::Rows { batches, .. }) => batches_text(&batches).unwrap(),
                other => panic!("Q{n} on one database: {other:?}"),
            };
            let got = cluster.query(&q).unwrap_or_else(|e| panic!("Q{n} through the cluster: {e}"));
            if let Some(why) = check::compare(&batches_text(&got).unwrap(), &want) {
                differ.push(format!("Q{n}: {why}"));
            }
        }
        assert!(differ.is_empty(), "answers differ: {differ:#?}");
        let plan = cluster.explain("SELECT count(*) FROM lineitem WHERE l_quantity < 10").unwrap();
        assert!(plan.contains("tasks=3"), "{plan}");
        let scans: Vec<&str> = plan.lines().filter(|l| l.contains("StrataShardScan")).collect();
        assert_eq!(scans.len(), 3, "{plan}");
        assert!(scans.iter().all(|l| l.contains("filters=[l_quantity < ")), "the filter is not pushed down: {plan}");
        cluster.stop().unwrap();
    }
}
