"""The Python package against a real database in a temporary directory."""

import datetime
import os
import random

import pyarrow as pa
import pytest

import strata


@pytest.fixture
def db(tmp_path):
    with strata.open(tmp_path / "db") as d:
        yield d


def people(db):
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("age", pa.int32()),
            pa.field("score", pa.float64()),
            pa.field("active", pa.bool_()),
            pa.field("photo", pa.binary()),
        ]
    )
    return db.create_table("people", schema, ["id"])


def test_open_close_and_reopen_keeps_data(tmp_path):
    path = tmp_path / "db"
    with strata.open(path) as db:
        assert not db.closed
        db.sql("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT)")
        assert db.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')") == 2
        t = db.table("t")
    assert db.closed
    with pytest.raises(strata.Error) as e:
        db.sql("SELECT 1")
    assert e.value.kind == "closed"
    with pytest.raises(strata.Error) as e:
        t.get(1)
    assert e.value.kind == "closed"
    db.close()  # a second close does nothing

    with strata.open(path, create=False) as db:
        assert db.tables() == ["t"]
        assert db.table("t").get(2) == {"id": 2, "v": "b"}


def test_missing_database_without_create_and_a_locked_directory(tmp_path):
    with pytest.raises(strata.Error) as e:
        strata.open(tmp_path / "nope", create=False)
    assert e.value.kind == "invalid_argument"
    with strata.open(tmp_path / "db"):
        with pytest.raises(strata.Error) as e:
            strata.open(tmp_path / "db")
        assert e.value.kind == "locked"


def test_sql_results_row_counts_and_ddl(db):
    assert db.sql("CREATE TABLE t (id INT PRIMARY KEY, g TEXT, x DOUBLE)") is None
    assert db.sql("INSERT INTO t VALUES (1, 'a', 1.5), (2, 'a', 2.5), (3, 'b', NULL)") == 3
    assert db.sql("UPDATE t SET x = 10 WHERE g = 'b'") == 1
    assert db.sql("DELETE FROM t WHERE id = 1") == 1
    out = db.sql("SELECT g, sum(x) AS s, count(*) AS n FROM t GROUP BY g ORDER BY g")
    assert isinstance(out, pa.Table)
    assert out.column_names == ["g", "s", "n"]
    assert out.to_pylist() == [{"g": "a", "s": 2.5, "n": 1}, {"g": "b", "s": 10.0, "n": 1}]
    # Several statements: the last one's result.
    assert db.sql("INSERT INTO t VALUES (4, 'c', 0); SELECT count(*) AS n FROM t").to_pylist() == [{"n": 3}]
    assert db.sql("DROP TABLE t") is None
    assert db.tables() == []


def test_tables_with_sql_indexes_are_written_through_sql_only(db):
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, g TEXT); CREATE INDEX t_g ON t (g)")
    t = db.table("t")
    with pytest.raises(strata.Error) as e:
        t.insert({"id": 1, "g": "a"})
    assert "t_g" in str(e.value)
    with pytest.raises(strata.Error):
        t.insert_arrow(pa.table({"id": pa.array([2], pa.int32()), "g": ["b"]}))
    with db.transaction() as tx:
        with pytest.raises(strata.Error):
            tx.insert(t, {"id": 3, "g": "c"})
    assert db.sql("INSERT INTO t VALUES (4, 'd')") == 1
    assert db.sql("SELECT id FROM t WHERE g = 'd'").to_pylist() == [{"id": 4}]
    db.sql("DROP INDEX t_g")
    t.insert({"id": 5, "g": "e"})
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 2}]


def test_sql_parameters_are_typed_to_the_statement(db):
    db.sql("CREATE TABLE t (id SMALLINT PRIMARY KEY, name TEXT, w REAL)")
    for i in range(5):
        assert db.sql("INSERT INTO t VALUES ($1, $2, $3)", [i, f"n{i}", i / 2]) == 1
    out = db.sql("SELECT id, name FROM t WHERE id >= $1 AND name <> $2 ORDER BY id", [2, "n3"])
    assert out.to_pylist() == [{"id": 2, "name": "n2"}, {"id": 4, "name": "n4"}]
    assert db.sql("SELECT count(*) AS n FROM t WHERE name = $1", ["x'; DROP TABLE t; --"]).to_pylist() == [{"n": 0}]
    with pytest.raises(ValueError):
        db.sql("SELECT 1; SELECT 2", [1])
    with pytest.raises(strata.Error) as e:
        db.sql("SELECT * FROM t WHERE id = $1", [1, 2])
    assert e.value.sqlstate == "22000"


def test_sql_errors_carry_sqlstate_and_change_nothing(db):
    db.sql("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT NOT NULL)")
    db.sql("INSERT INTO t VALUES (1, 'a')")
    cases = [
        ("INSERT INTO t VALUES (2, 'b'), (1, 'c')", "23505"),
        ("INSERT INTO t VALUES (3, NULL)", "23502"),
        ("SELECT * FROM missing", "42P01"),
        ("SELECT nope FROM t", "42703"),
        ("SELEC 1", "42601"),
        ("BEGIN ISOLATION LEVEL SERIALIZABLE", "0A000"),
        ("BEGIN; CREATE TABLE u (id INT PRIMARY KEY)", "25001"),
    ]
    for query, state in cases:
        with pytest.raises(strata.Error) as e:
            db.sql(query)
        assert e.value.kind == "sql", query
        assert e.value.sqlstate == state, (query, str(e.value))
    assert db.sql("SELECT id, v FROM t").to_pylist() == [{"id": 1, "v": "a"}]
    # One call is one session: a block inside it commits or rolls back whole, and one left
    # open at the end of the call is rolled back.
    assert db.sql("BEGIN; INSERT INTO t VALUES (2, 'b'); ROLLBACK; SELECT count(*) AS n FROM t").to_pylist() == [{"n": 1}]
    db.sql("BEGIN; INSERT INTO t VALUES (2, 'b'); COMMIT")
    db.sql("BEGIN; INSERT INTO t VALUES (3, 'c')")
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 2}]


def test_rows_by_key(db):
    t = people(db)
    assert t.name == "people" and t.primary_key == ["id"]
    assert t.schema.field("age").type == pa.int32()
    t.insert({"id": 1, "name": "ada", "age": 36, "score": 9.5, "active": True, "photo": b"\x00\x01"})
    t.insert([2, "bob", None, 1, False, bytearray(b"x")])
    assert t.get(1) == {"id": 1, "name": "ada", "age": 36, "score": 9.5, "active": True, "photo": b"\x00\x01"}
    assert t.get(2, columns=["score", "age"]) == {"score": 1.0, "age": None}
    assert t.get(3) is None
    # Partial update: only the named columns change.
    t.update(1, age=37)
    t.update(2, {"name": "robert"}, active=True)
    assert t.get(1)["age"] == 37 and t.get(1)["name"] == "ada"
    assert t.get(2)["name"] == "robert" and t.get(2)["active"] is True
    t.update(99, age=1)  # no such row: nothing happens
    assert t.get(99) is None
    t.delete(1)
    assert t.get(1) is None
    # An insert replaces the row with the same key.
    t.insert({"id": 2, "name": "bo"})
    assert t.get(2) == {"id": 2, "name": "bo", "age": None, "score": None, "active": None, "photo": None}
    # SQL sees the same rows.
    assert db.sql("SELECT id, name FROM people").to_pylist() == [{"id": 2, "name": "bo"}]


def test_bad_values_are_refused_before_writing(db):
    t = people(db)
    bad = [
        ({"id": 1, "age": 2**31}, OverflowError),
        ({"id": 1, "score": 10**400}, OverflowError),
        ({"id": 1, "age": "3"}, TypeError),
        ({"id": 1, "age": 1.5}, TypeError),
        ({"id": 1, "active": 1}, TypeError),
        ({"id": 1, "score": True}, TypeError),
        ({"id": 1, "name": b"bytes"}, TypeError),
        ({"id": 1, "photo": "text"}, TypeError),
        ({"id": "1"}, TypeError),
        ([1, "a"], ValueError),
        ("not a row", TypeError),
    ]
    for row, exc in bad:
        with pytest.raises(exc):
            t.insert(row)
    with pytest.raises(strata.Error) as e:
        t.insert({"id": 1, "nope": 1})
    assert e.value.kind == "unknown_column"
    with pytest.raises(strata.Error) as e:
        t.insert({"name": "no key"})
    assert e.value.kind == "type_mismatch"
    with pytest.raises(ValueError):
        t.update(1)
    with pytest.raises(ValueError):
        t.get((1, 2))
    assert db.sql("SELECT count(*) AS n FROM people").to_pylist() == [{"n": 0}]


def test_real_columns_refuse_what_a_float32_cannot_hold(db):
    db.sql("CREATE TABLE r (id INT PRIMARY KEY, w REAL)")
    t = db.table("r")
    t.insert({"id": 1, "w": 0.5})
    t.insert({"id": 2, "w": float("inf")})
    with pytest.raises(OverflowError):
        t.insert({"id": 3, "w": 1e300})
    assert t.get(1)["w"] == 0.5 and t.get(2)["w"] == float("inf") and t.get(3) is None


def test_composite_keys_and_key_ranges(db):
    db.sql("CREATE TABLE ev (dev INT, ts BIGINT, v DOUBLE, PRIMARY KEY (dev, ts))")
    t = db.table("ev")
    for dev in range(3):
        for ts in range(10):
            t.insert({"dev": dev, "ts": ts, "v": dev * 100.0 + ts})
    assert t.get((1, 5)) == {"dev": 1, "ts": 5, "v": 105.0}
    assert t.get([2, 9])["v"] == 209.0
    out = t.scan(["ts"], start=(1, 3), end=(1, 6))
    assert out.column("ts").to_pylist() == [3, 4, 5]
    out = t.scan(["dev", "ts"], start=(2, 8))
    assert out.to_pylist() == [{"dev": 2, "ts": 8}, {"dev": 2, "ts": 9}]
    t.delete((0, 0))
    assert t.get((0, 0)) is None


def test_scan_columns_filters_limits_match_sql(db):
    db.sql("CREATE TABLE m (k BIGINT PRIMARY KEY, g TEXT, q INT, f BOOLEAN) WITH (layout = 'L1-: column')")
    rows = ", ".join(f"({k}, '{'abc'[k % 3]}', {k % 7 if k % 5 else 'NULL'}, {str(k % 2 == 0).lower()})" for k in range(500))
    db.sql(f"INSERT INTO m VALUES {rows}")
    db.flush()
    db.compact("m")
    t = db.table("m")
    full = t.scan()
    assert full.num_rows == 500 and full.column_names == ["k", "g", "q", "f"]
    assert full.schema.field("q").type == pa.int32()
    for where in ["q > 3", "g = 'b' AND q IS NOT NULL", "q IS NULL OR f", "k BETWEEN 10 AND 20", "g IN ('a', 'c') AND NOT f"]:
        got = t.scan(["k", "q"], where=where)
        want = db.sql(f"SELECT k, q FROM m WHERE {where} ORDER BY k")
        assert got.to_pylist() == want.to_pylist(), where
    assert t.scan(["k"], where="q = 2", limit=3).column("k").to_pylist() == [2, 9, 16]
    assert t.scan(["k"], start=490).column("k").to_pylist() == list(range(490, 500))
    with pytest.raises(strata.Error) as e:
        t.scan(where="q + 1 > 3")
    assert e.value.sqlstate == "0A000"
    with pytest.raises(strata.Error) as e:
        t.scan(["nope"])
    assert e.value.kind == "unknown_column"


def test_insert_arrow_from_pyarrow_pandas_and_readers(db):
    t = people(db)
    data = pa.table(
        {
            "id": pa.array(range(1000), pa.int32()),  # cast to BIGINT
            "name": [f"p{i}" for i in range(1000)],
            "age": pa.array([i % 90 for i in range(1000)], pa.int64()),  # cast down, values fit
            "score": [None if i % 10 == 0 else i / 4 for i in range(1000)],
        }
    )
    assert t.insert_arrow(data) == 1000
    assert t.get(17) == {"id": 17, "name": "p17", "age": 17, "score": 4.25, "active": None, "photo": None}
    assert t.get(20)["score"] is None

    batch = pa.record_batch({"id": pa.array([5000, 5001], pa.int64()), "active": [True, False]})
    assert t.insert_arrow(batch) == 2
    reader = pa.RecordBatchReader.from_batches(batch.schema, [batch, batch])
    assert t.insert_arrow(reader) == 4
    assert t.get(5001)["active"] is False

    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"id": [7000, 7001], "name": ["x", "y"], "score": [0.5, None]})
    assert t.insert_arrow(frame) == 2
    assert t.get(7001) == {"id": 7001, "name": "y", "age": None, "score": None, "active": None, "photo": None}
    assert db.sql("SELECT count(*) AS n FROM people").to_pylist() == [{"n": 1004}]


def test_multi_get_reads_a_batch_of_keys_in_their_order(db):
    t = people(db)
    assert t.insert_arrow(pa.table({"id": list(range(200)), "name": [f"p{i}" for i in range(200)]})) == 200
    keys = [5, 500, 17] + list(range(199, 159, -1))
    rows = t.multi_get(keys, ["name"])
    assert rows[:3] == [{"name": "p5"}, None, {"name": "p17"}]
    assert [r["name"] for r in rows[3:]] == [f"p{i}" for i in range(199, 159, -1)]
    assert t.multi_get([]) == []
    assert t.multi_get([3])[0]["id"] == 3
    with pytest.raises(strata.Error) as e:
        t.multi_get([1], ["nope"])
    assert e.value.kind == "unknown_column"


def test_insert_arrow_refuses_bad_data_without_writing(db):
    t = people(db)
    with pytest.raises(strata.Error) as e:
        t.insert_arrow(pa.table({"id": [1], "height": [1.8]}))
    assert e.value.kind == "unknown_column"
    with pytest.raises(strata.Error) as e:
        t.insert_arrow(pa.table({"name": ["no key"]}))
    assert e.value.kind == "type_mismatch"
    with pytest.raises(ValueError, match="0 rows were written"):
        t.insert_arrow(pa.table({"id": [1, 2], "age": pa.array([1, 2**40], pa.int64())}))
    with pytest.raises(strata.Error, match="0 rows were written"):
        t.insert_arrow(pa.table({"id": pa.array([1, None], pa.int64())}))
    with pytest.raises(TypeError):
        t.insert_arrow([{"id": 1}])
    assert db.sql("SELECT count(*) AS n FROM people").to_pylist() == [{"n": 0}]


def test_both_engines_and_layouts(db):
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("a", pa.int64()), pa.field("b", pa.string())])
    tables = [
        db.create_table("rows", schema, ["k"]),
        db.create_table("groups", schema, ["k"], layout="L1: (a) (b); L2-: column"),
        db.create_table("lin", schema, ["k"], engine="lineage"),
    ]
    for t in tables:
        t.insert_arrow(pa.table({"k": list(range(300)), "a": [i * 2 for i in range(300)], "b": [str(i) for i in range(300)]}))
        t.update(7, a=-1)
        t.delete(8)
    db.flush()
    db.compact()
    for t in tables:
        assert t.get(7) == {"k": 7, "a": -1, "b": "7"}
        assert t.get(8) is None
        assert t.scan(["a"], where="a < 4").column("a").to_pylist() == [0, 2, -1]  # key order
    with pytest.raises(ValueError):
        db.create_table("bad", schema, ["k"], engine="btree")
    with pytest.raises(TypeError):
        db.create_table("bad", pa.schema([pa.field("k", pa.decimal128(10, 2))]), ["k"])
    with pytest.raises(strata.Error) as e:
        db.create_table("rows", schema, ["k"])
    assert e.value.kind == "table_exists"


def test_dates(db):
    db.sql("CREATE TABLE d (id INT PRIMARY KEY, day DATE)")
    t = db.table("d")
    assert t.schema.field("day").type == pa.date32()
    t.insert({"id": 1, "day": datetime.date(1998, 12, 1)})
    t.insert([2, datetime.date(1969, 7, 20)])
    db.sql("INSERT INTO d VALUES (3, DATE '2000-02-29'), (4, NULL)")
    assert t.get(1)["day"] == datetime.date(1998, 12, 1)
    assert t.get(3) == {"id": 3, "day": datetime.date(2000, 2, 29)}
    for bad in [datetime.datetime(2000, 1, 1), "2000-01-01", 10957]:
        with pytest.raises(TypeError):
            t.insert({"id": 9, "day": bad})
    assert db.sql("SELECT id FROM d WHERE day < DATE '1990-01-01'").to_pylist() == [{"id": 2}]
    assert db.sql("SELECT id FROM d WHERE day = $1", [datetime.date(1998, 12, 1)]).to_pylist() == [{"id": 1}]
    got = t.scan(["id"], where="day >= DATE '1998-01-01'")
    assert got.column("id").to_pylist() == [1, 3]
    t.insert_arrow(pa.table({"id": [5], "day": pa.array([datetime.date(2020, 2, 29)], pa.date32())}))
    assert db.sql("SELECT max(day) AS m FROM d").to_pylist() == [{"m": datetime.date(2020, 2, 29)}]


def test_results_are_pyarrow_tables_usable_by_pandas(db):
    pd = pytest.importorskip("pandas")
    db.sql("CREATE TABLE t (id BIGINT PRIMARY KEY, v DOUBLE)")
    db.sql("INSERT INTO t VALUES (1, 0.5), (2, 1.5)")
    frame = db.sql("SELECT * FROM t ORDER BY id").to_pandas()
    assert list(frame["v"]) == [0.5, 1.5]
    empty = db.sql("SELECT * FROM t WHERE id > 10")
    assert empty.num_rows == 0 and empty.column_names == ["id", "v"]


def test_random_operations_match_a_model(db):
    """Random inserts, updates and deletes through the row API, with flushes and compactions,
    checked against a dict after each phase by get, scan and SQL."""
    seed = int(os.environ.get("STRATA_SEEDS", str(random.randrange(2**32))).split(",")[0])
    print(f"seed {seed} (replay: STRATA_SEEDS={seed})")
    rng = random.Random(seed)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("a", pa.int32()), pa.field("s", pa.string())])
    t = db.create_table("r", schema, ["k"], layout="L1: (a) (s)")
    model = {}
    for phase in range(6):
        for _ in range(400):
            k = rng.randrange(200)
            op = rng.random()
            if op < 0.5:
                row = {"k": k, "a": rng.choice([None, rng.randrange(-(2**31), 2**31)]), "s": rng.choice([None, "x" * rng.randrange(5)])}
                t.insert(row)
                model[k] = row
            elif op < 0.8:
                a = rng.randrange(100)
                t.update(k, a=a)
                if k in model:
                    model[k]["a"] = a
            else:
                t.delete(k)
                model.pop(k, None)
        if phase % 2:
            db.flush()
        if phase == 3:
            db.compact("r")
        want = [model[k] for k in sorted(model)]
        assert t.scan().to_pylist() == want, f"seed {seed}"
        assert db.sql("SELECT k, a, s FROM r ORDER BY k").to_pylist() == want, f"seed {seed}"
        for k in rng.sample(range(200), 20):
            assert t.get(k) == model.get(k), f"seed {seed}, key {k}"


def accounts(db, engine="lsm"):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("balance", pa.int64())])
    t = db.create_table(f"accounts_{engine}", schema, ["id"], engine=engine)
    t.insert({"id": 1, "balance": 100})
    t.insert({"id": 2, "balance": 0})
    return t


@pytest.mark.parametrize("engine", ["lsm", "lineage"])
def test_a_transaction_reads_its_own_writes_and_commits_them_together(db, engine):
    t = accounts(db, engine)
    with db.transaction() as tx:
        a = tx.get(t, 1)["balance"]
        tx.update(t, 1, balance=a - 30)
        tx.update(t, 2, {"balance": tx.get(t, 2)["balance"] + 30})
        tx.insert(t, {"id": 3, "balance": 5})
        tx.delete(t, 3)
        tx.insert(t, {"id": 4, "balance": 7})
        assert tx.get(t, 1) == {"id": 1, "balance": 70}
        assert tx.get(t, 3) is None
        # Scans see the transaction's writes; the table outside does not yet.
        assert tx.scan(t).column("balance").to_pylist() == [70, 30, 7]
        assert tx.scan(t, ["id"], where="balance > 10").column("id").to_pylist() == [1, 2]
        assert t.get(4) is None
    assert [t.get(i)["balance"] for i in (1, 2, 4)] == [70, 30, 7]
    assert t.get(3) is None


def test_a_block_that_raises_rolls_back_and_an_ended_transaction_refuses_work(db):
    t = accounts(db)
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            tx.update(t, 1, balance=0)
            raise RuntimeError("boom")
    assert t.get(1)["balance"] == 100
    with pytest.raises(strata.Error) as e:
        tx.get(t, 1)
    assert e.value.kind == "invalid_argument"
    tx.rollback()  # nothing left to discard
    ro = db.transaction(read_only=True)
    with pytest.raises(strata.Error):
        ro.insert(t, {"id": 9, "balance": 9})
    ro.commit()


def test_the_first_committer_wins_and_the_loser_writes_nothing(db):
    t = accounts(db)
    a = db.transaction()
    b = db.transaction()
    a.update(t, 1, balance=1)
    b.update(t, 1, balance=2)
    b.insert(t, {"id": 5, "balance": 5})
    a.commit()
    with pytest.raises(strata.Error) as e:
        b.commit()
    assert e.value.kind == "conflict"
    assert t.get(1)["balance"] == 1
    assert t.get(5) is None
    # A write to a row committed after the transaction began fails at once.
    c = db.transaction()
    t.update(2, balance=50)
    with pytest.raises(strata.Error) as e:
        c.update(t, 2, balance=60)
    assert e.value.kind == "conflict"
    with pytest.raises(strata.Error):
        c.commit()
    assert t.get(2)["balance"] == 50
