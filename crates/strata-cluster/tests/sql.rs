//! Distributed SQL on three nodes in one process: a table in 3 shards × 3 replicas queried
//! through any node; each query's plan has one scan task per shard with the filters, projection
//! and limit pushed into it; answers equal what the rows written say.

use std::time::{Duration, Instant};

use common::{settled, start_three};
use strata::{Column, ColumnType, Schema, Value};
use strata_cluster::sql::from_ipc;
use strata_cluster::types::{to_wire, NodeRequest, NodeResponse, WireValue};
use strata_cluster::Node;

mod common;

/// A query's rows through `node`, and how many times it ran.
async fn query(node: &Node, sql: &str) -> (Vec<Vec<Value>>, usize) {
    match node.request(NodeRequest::Sql { query: sql.into() }).await {
        NodeResponse::Rows { ipc, runs, .. } => {
            let batches = from_ipc(&ipc).unwrap();
            (batches.iter().flat_map(strata::scan::batch_rows).collect(), runs)
        }
        other => panic!("{sql} through node {}: {other:?}", node.id()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queries_run_one_scan_task_per_shard_and_answer_as_the_rows_say() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_three(dir.path()).await;
    let schema = Schema::new(
        vec![
            Column::new("k", ColumnType::BigInt),
            Column::new("g", ColumnType::Int),
            Column::new("v", ColumnType::Text),
        ],
        &["k"],
    )
    .unwrap();
    let create = NodeRequest::CreateTable {
        name: "t".into(),
        schema: schema.to_bytes(),
        splits: vec![WireValue::BigInt(100), WireValue::BigInt(200)],
        replicas: 3,
    };
    assert_eq!(settled(&nodes[0], create).await, NodeResponse::Done);
    let row = |k: i64| vec![Value::BigInt(k), Value::Int((k % 7) as i32), Value::Text(format!("v{k}"))];
    for shard in 0..3i64 {
        let rows: Vec<Vec<WireValue>> = (shard * 100..shard * 100 + 100).map(|k| to_wire(&row(k))).collect();
        let insert = NodeRequest::Insert { table: "t".into(), rows };
        assert!(matches!(settled(&nodes[shard as usize], insert).await, NodeResponse::Written { .. }));
    }
    // Every node's worker is in the shard map before queries plan on them.
    let start = Instant::now();
    loop {
        let (rows, _) = query(&nodes[1], "SELECT count(*) FROM t").await;
        if rows == vec![vec![Value::BigInt(300)]] {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "count: {rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (got, runs) = query(&nodes[2], "SELECT k, g, v FROM t WHERE k >= 150 AND g = 3 ORDER BY k").await;
    let want: Vec<Vec<Value>> = (150..300).filter(|k| k % 7 == 3).map(row).collect();
    assert_eq!((got, runs), (want, 1));
    let (got, _) = query(&nodes[0], "SELECT g, count(*), sum(k) FROM t GROUP BY g ORDER BY g").await;
    let want: Vec<Vec<Value>> = (0..7)
        .map(|g| {
            let ks: Vec<i64> = (0..300).filter(|k| k % 7 == g).collect();
            vec![Value::Int(g as i32), Value::BigInt(ks.len() as i64), Value::BigInt(ks.iter().sum())]
        })
        .collect();
    assert_eq!(got, want);
    // A filter strata does not apply runs above the scans.
    let (got, _) = query(&nodes[2], "SELECT k FROM t WHERE length(v) = 2 ORDER BY k").await;
    assert_eq!(got, (0..10).map(|k| vec![Value::BigInt(k)]).collect::<Vec<_>>());
    let (got, _) = query(&nodes[1], "SELECT v FROM t WHERE k BETWEEN 95 AND 104 ORDER BY k LIMIT 3").await;
    assert_eq!(
        got,
        vec![vec![Value::Text("v95".into())], vec![Value::Text("v96".into())], vec![Value::Text("v97".into())]]
    );

    // The plan: one scan task per shard, each holding one shard, with the filter pushed in.
    let (plan, _) = query(&nodes[0], "EXPLAIN SELECT g, count(*) FROM t WHERE g > 2 GROUP BY g").await;
    let text = match plan.as_slice() {
        [row] => match row.as_slice() {
            [Value::Text(t)] => t.clone(),
            other => panic!("an EXPLAIN row: {other:?}"),
        },
        other => panic!("EXPLAIN answered {other:?}"),
    };
    let scans: Vec<&str> = text.lines().filter(|l| l.contains("StrataShardScan")).collect();
    assert!(!scans.is_empty(), "no shard scan in the plan:\n{text}");
    assert!(text.contains("tasks=3") || text.matches("shards=[").count() >= 3, "not one task per shard:\n{text}");
    assert!(scans.iter().all(|l| l.contains("filters=[")), "the filter is not pushed into the scans:\n{text}");
    println!("{text}");

    for n in nodes {
        n.shutdown().await.unwrap();
    }
}
