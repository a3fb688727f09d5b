//! Robustness of every decoder against damaged input: valid encodings are mutated at random
//! (bit flips, truncation, inserted and overwritten bytes) and decoded. Decoders must return an
//! error or a value that is safe to use — never panic. Seeds are random and printed on failure.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::catalog::TableOptions;
use crate::codec::Reader;
use crate::mvcc::Kind;
use crate::sst::block::{Block, BlockBuilder};
use crate::types::key::{decode_key, encode_key};
use crate::types::row::{decode_row, encode_row, RowIter};
use crate::types::{Column, ColumnType, Schema, Value};
use crate::version::edit::{EditRecord, VersionEdit};
use crate::version::FileMeta;
use crate::write::batch::{BatchOp, WriteBatch};

fn mutate(rng: &mut StdRng, good: &[u8]) -> Vec<u8> {
    let mut b = good.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..4) {
            0 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => b.truncate(rng.gen_range(0..=b.len())),
            2 => {
                let i = rng.gen_range(0..=b.len());
                b.insert(i, rng.gen());
            }
            _ if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] = [0, 0xFF, 0x80, rng.gen()][rng.gen_range(0..4)];
            }
            _ => {}
        }
    }
    b
}

const TYPES: [ColumnType; 5] =
    [ColumnType::Int, ColumnType::Text, ColumnType::Double, ColumnType::Bytea, ColumnType::Boolean];

/// A block of 40 versions; with `varied` its keys differ in length (a bundled key page),
/// otherwise not (a fixed-width one).
fn sample_block(varied: bool) -> Vec<u8> {
    let mut b = BlockBuilder::new(&TYPES);
    let mut keys: Vec<String> =
        (0..40u32).map(|i| if varied { format!("key{}", i * i) } else { format!("key{i:03}") }).collect();
    keys.sort();
    for i in 0..40u32 {
        let cells = vec![
            Some(Value::Int(i as i32)),
            if i % 3 == 0 { None } else { Some(Value::Text(format!("t{i}"))) },
            Some(Value::Double(f64::from(i))),
            if i % 5 == 0 { Some(Value::Null) } else { Some(Value::Bytea(vec![i as u8; 3])) },
            Some(Value::Boolean(i % 2 == 0)),
        ];
        let mut row = Vec::new();
        encode_row(&TYPES, &cells, &mut row);
        let kind = if i % 7 == 0 { Kind::Update } else { Kind::Put };
        let cells = RowIter::new(&TYPES, &row).unwrap().map(Result::unwrap);
        b.add(keys[i as usize].as_bytes(), 100 - u64::from(i), kind, cells);
    }
    b.finish().0
}

#[test]
fn damaged_encodings_never_panic() {
    let seed = crate::test_seeds::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let blocks = [sample_block(false), sample_block(true)];
    let mut row = Vec::new();
    encode_row(
        &TYPES,
        &[Some(Value::Int(1)), Some("x".into()), None, Some(Value::Null), Some(Value::Boolean(true))],
        &mut row,
    );
    let key_types = [ColumnType::Text, ColumnType::BigInt];
    let key = encode_key(&key_types, &["a\0b".into(), Value::BigInt(-5)]);
    let mut batch = WriteBatch::new();
    batch.push(BatchOp { table_id: 3, kind: Kind::Put, key: key.clone(), row: row.clone() });
    batch.push(BatchOp { table_id: 3, kind: Kind::Delete, key: key.clone(), row: Vec::new() });
    let mut wal = Vec::new();
    batch.encode(42, 1_795_000_000_000, &mut wal);
    let schema =
        Schema::new(vec![Column::new("k", ColumnType::Text), Column::new("v", ColumnType::Double)], &["k"]).unwrap();
    let mut edit = VersionEdit::default();
    edit.push(EditRecord::CreateTable(
        crate::catalog::TableInfo::new(
            7,
            "t".into(),
            std::sync::Arc::new(schema.clone()),
            TableOptions::with_layout("L1-: column"),
        )
        .unwrap(),
    ));
    edit.push(EditRecord::AddFile {
        table: 7,
        level: 2,
        file: FileMeta {
            number: 9,
            size: 100,
            entries: 3,
            min_seq: 1,
            max_seq: 4,
            smallest: b"a".to_vec(),
            largest: b"z".to_vec(),
            cg: 0,
            tier: 2,
        },
    });
    edit.push(EditRecord::Tiers(vec![
        crate::tier::TierRecord { name: "fast".into(), dir: "/f".into(), budget: 1 << 20, token: 3 },
        crate::tier::TierRecord { name: "slow".into(), dir: "/s".into(), budget: 0, token: 4 },
    ]));
    edit.push(EditRecord::DeleteFile { table: 7, level: 1, number: 3 });
    let edit = edit.encode();
    let mut sch = Vec::new();
    schema.encode(&mut sch);

    for round in 0..3000 {
        let block = &blocks[round / 2 % 2];
        let inputs = [block, &row, &key, &wal, &edit, &sch].map(|good| mutate(&mut rng, good));
        let checked = std::panic::catch_unwind(|| {
            let format = if round % 2 == 0 { 4 } else { 3 };
            if let Ok(b) = Block::decode_format(inputs[0].clone(), &TYPES, format) {
                // A block that validates must be safe to read everywhere, with the key index
                // or without.
                for k in [&b"key010"[..], b"", b"zzz"] {
                    let (first, seqs) = b.versions_of(k);
                    let _ = b.seek(k);
                    for i in first..first + seqs.len() {
                        let _ = (b.kind(i), b.cell(i, 0));
                    }
                }
                b.build_index();
                for i in 0..b.len() {
                    let _ = (b.key(i), b.seq(i), b.kind(i));
                    for c in 0..TYPES.len() {
                        let _ = b.cell(i, c);
                    }
                }
                let _ = b.seek(b"key010");
            }
            let _ = decode_row(&TYPES, &inputs[1], None);
            let _ = decode_key(&key_types, &inputs[2]);
            let _ = WriteBatch::decode(&inputs[3]);
            let _ = VersionEdit::decode(&inputs[4], 7);
            let _ = Schema::decode(&mut Reader::new(&inputs[5]));
        });
        assert!(checked.is_ok(), "a decoder panicked on damaged input (seed {seed}, round {round})");
    }
}
