"""psycopg 3 against a running strata server: python psycopg_check.py HOST PORT PASSWORD.

Run by crates/strata-pg/tests/clients.rs; exits non-zero (with a traceback) on the first
failed check.
"""

import datetime
import math
import sys
import threading
from decimal import Decimal

import psycopg
from psycopg import errors

host, port, password = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dsn = dict(host=host, port=port, user="strata", dbname="app", password=password, connect_timeout=10)

with psycopg.connect(**dsn, autocommit=True) as conn:
    cur = conn.cursor()
    cur.execute("CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT NOT NULL, qty INT, price DOUBLE)")
    # Server-side parameters ($1, ...): psycopg 3 sends these through the extended protocol.
    for i in range(10):
        cur.execute("INSERT INTO items VALUES (%s, %s, %s, %s)", (i, f"item{i}", i * 3, i * 1.25))
        assert cur.rowcount == 1, cur.rowcount
    cur.executemany("INSERT INTO items (id, name) VALUES (%s, %s)", [(100, "a"), (101, "b")])
    cur.execute("UPDATE items SET qty = qty + 1 WHERE id < %s", (5,))
    assert cur.rowcount == 5, cur.rowcount
    assert cur.statusmessage == "UPDATE 5", cur.statusmessage
    cur.execute("DELETE FROM items WHERE qty IS NULL")
    assert cur.rowcount == 2, cur.rowcount
    cur.execute("SELECT id, name, qty, price FROM items WHERE id BETWEEN %s AND %s ORDER BY id", (3, 5))
    rows = cur.fetchall()
    assert rows == [(3, "item3", 10, 3.75), (4, "item4", 13, 5.0), (5, "item5", 15, 6.25)], rows
    assert [d.name for d in cur.description] == ["id", "name", "qty", "price"]
    # A prepared statement reused with new parameters.
    for i in range(3):
        cur.execute("SELECT name FROM items WHERE id = %s", (i,), prepare=True)
        assert cur.fetchone() == (f"item{i}",)
    cur.execute("SELECT count(*), sum(qty) FROM items")
    assert cur.fetchone() == (10, 140), "aggregates"
    # Errors carry SQLSTATE codes and leave the table as it was.
    try:
        cur.execute("INSERT INTO items VALUES (%s, %s, NULL, NULL), (%s, %s, NULL, NULL)", (50, "x", 1, "dup"))
        raise AssertionError("duplicate key accepted")
    except errors.UniqueViolation as e:
        assert e.sqlstate == "23505"
    try:
        cur.execute("SELECT * FROM nowhere")
        raise AssertionError("unknown table accepted")
    except errors.UndefinedTable:
        pass
    cur.execute("SELECT count(*) FROM items")
    assert cur.fetchone() == (10,)

# Values in text and in binary format (binary=True: psycopg decodes each value by the type the
# server announced, so a type announced for another type's bytes reads wrong or fails).
NAN, INF = float("nan"), float("inf")


def same(got, want):
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return type(got) is type(want) and got == want


with psycopg.connect(**dsn, autocommit=True) as conn:
    conn.execute("CREATE TABLE eb (id INT PRIMARY KEY, n INT, s SMALLINT, f DOUBLE, t TEXT, by BYTEA, d DATE, ok BOOLEAN)")
    conn.execute(
        "INSERT INTO eb VALUES (1, 100000, 7, 2.5, 'héllo ✓', X'00ff', DATE '2026-11-26', true),"
        " (2, -5, 8, CAST('NaN' AS DOUBLE), '', X'', DATE '1970-01-01', false)"
    )
    columns = [
        ("CASE WHEN id = 1 THEN n ELSE 1000 END", [100000, 1000]),
        ("COALESCE(s, n)", [7, 8]),
        ("NULLIF(n, -5)", [100000, None]),
        ("n + s", [100007, 3]),
        ("s * 2", [14, 16]),
        ("s", [7, 8]),
        ("CAST(n AS DOUBLE) / 4", [25000.0, -1.25]),
        ("CAST(n AS REAL)", [100000.0, -5.0]),
        ("f", [2.5, NAN]),
        ("CASE WHEN ok THEN f ELSE CAST('-Infinity' AS DOUBLE) END", [2.5, -INF]),
        ("t", ["héllo ✓", ""]),
        ("t || CAST(s AS TEXT)", ["héllo ✓7", "8"]),
        ("by", [b"\x00\xff", b""]),
        ("d", [datetime.date(2026, 11, 26), datetime.date(1970, 1, 1)]),
        ("ok", [True, False]),
        ("n > 0 AND ok", [True, False]),
        ("CAST(n AS DECIMAL(12, 2))", [Decimal("100000.00"), Decimal("-5.00")]),
        ("NULL", [None, None]),
    ]
    aggregates = [
        ("sum(n)", 99995),
        ("sum(s)", 15),
        ("avg(s)", 7.5),
        ("min(s)", 7),
        ("max(n)", 100000),
        ("count(*)", 2),
        ("min(d)", datetime.date(1970, 1, 1)),
        ("max(t)", "héllo ✓"),
        ("sum(CAST(s AS DECIMAL(10, 1)))", Decimal("15.0")),
    ]
    parameters = [
        ("SELECT n FROM eb WHERE s = %s", (8,), [-5]),
        ("SELECT n FROM eb WHERE f = %s", (2.5,), [100000]),
        ("SELECT id FROM eb WHERE t = %s", ("héllo ✓",), [1]),
        ("SELECT id FROM eb WHERE by = %s", (b"",), [2]),
        ("SELECT id FROM eb WHERE d = %s", (datetime.date(2026, 11, 26),), [1]),
        ("SELECT %s", (3_000_000_000,), [3_000_000_000]),
        ("SELECT %s", (5,), [5]),
    ]
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        for expr, want in columns:
            cur.execute(f"SELECT {expr} FROM eb ORDER BY id")
            got = [r[0] for r in cur.fetchall()]
            assert all(same(g, w) for g, w in zip(got, want)) and len(got) == len(want), (binary, expr, got, want)
        for expr, want in aggregates:
            cur.execute(f"SELECT {expr} FROM eb")
            got = cur.fetchone()[0]
            assert same(got, want), (binary, expr, got, want)
        for sql, params, want in parameters:
            cur.execute(sql, params)
            got = [r[0] for r in cur.fetchall()]
            assert got == want and all(type(g) is type(w) for g, w in zip(got, want)), (binary, sql, got, want)

# Transactions. Without autocommit psycopg sends BEGIN before the first statement, and COMMIT
# or ROLLBACK only while the server reports a transaction in progress.
TS = psycopg.pq.TransactionStatus
with psycopg.connect(**dsn, autocommit=True) as conn:
    conn.execute("CREATE TABLE acct (id INT PRIMARY KEY, balance BIGINT NOT NULL)")
    conn.execute("INSERT INTO acct VALUES (1, 100), (2, 0)")

with psycopg.connect(**dsn) as conn:
    assert conn.info.transaction_status == TS.IDLE
    conn.execute("UPDATE acct SET balance = balance - 30 WHERE id = %s", (1,))
    assert conn.info.transaction_status == TS.INTRANS, conn.info.transaction_status
    conn.execute("UPDATE acct SET balance = balance + 30 WHERE id = %s", (2,))
    # The block sees its own writes, with parameters and in aggregates.
    assert conn.execute("SELECT sum(balance), min(balance) FROM acct").fetchone() == (100, 30)
    conn.commit()
    assert conn.info.transaction_status == TS.IDLE
    # Rolled back: nothing of it lands.
    conn.execute("DELETE FROM acct")
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM acct").fetchone() == (2,)
    conn.commit()
    # A failed statement fails the block (25P02 afterwards) until ROLLBACK.
    conn.execute("UPDATE acct SET balance = 0 WHERE id = 1")
    try:
        conn.execute("INSERT INTO acct VALUES (%s, %s)", (2, 5))
        raise AssertionError("duplicate key accepted")
    except errors.UniqueViolation:
        pass
    assert conn.info.transaction_status == TS.INERROR, conn.info.transaction_status
    try:
        conn.execute("SELECT 1")
        raise AssertionError("a statement in a failed block ran")
    except errors.InFailedSqlTransaction as e:
        assert e.sqlstate == "25P02"
    conn.rollback()
    assert conn.execute("SELECT balance FROM acct WHERE id = 1").fetchone() == (70,)
    conn.commit()
    # `with conn.transaction()` commits, or rolls back on an exception.
    with conn.transaction():
        conn.execute("UPDATE acct SET balance = 71 WHERE id = 1")
    try:
        with conn.transaction():
            conn.execute("UPDATE acct SET balance = 0 WHERE id = 1")
            raise KeyError("boom")
    except KeyError:
        pass
    assert conn.execute("SELECT balance FROM acct WHERE id = 1").fetchone() == (71,)
    conn.commit()
    # DDL inside a block is refused.
    try:
        conn.execute("CREATE TABLE other (id INT PRIMARY KEY)")
        raise AssertionError("DDL in a block accepted")
    except errors.ActiveSqlTransaction:
        pass
    conn.rollback()

# READ COMMITTED (the default): a second writer of a row waits for the first, then updates the
# row as committed; nothing fails and no increment is lost.
with psycopg.connect(**dsn) as a, psycopg.connect(**dsn) as b:
    (before,) = a.execute("SELECT balance FROM acct WHERE id = 2").fetchone()
    a.commit()
    a.execute("UPDATE acct SET balance = balance + 1 WHERE id = 2")
    waited = {}

    def second():
        try:
            b.execute("UPDATE acct SET balance = balance + 2 WHERE id = 2")
            b.commit()
            waited["ok"] = True
        except Exception as e:  # reported below
            waited["error"] = e

    t = threading.Thread(target=second)
    t.start()
    t.join(0.3)
    assert t.is_alive(), f"the second writer did not wait: {waited}"
    a.commit()
    t.join(10)
    assert not t.is_alive() and waited.get("ok"), waited
    assert a.execute("SELECT balance FROM acct WHERE id = 2").fetchone() == (before + 3,)
    a.commit()
    a.execute("UPDATE acct SET balance = %s WHERE id = 2", (before,))
    a.commit()

# REPEATABLE READ: two blocks write one row, the second to commit gets 40001 and is idle
# afterwards; run again, it succeeds.
with psycopg.connect(**dsn) as a, psycopg.connect(**dsn) as b:
    a.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    b.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    a.execute("UPDATE acct SET balance = balance + 1 WHERE id = 2")
    b.execute("UPDATE acct SET balance = balance + 2 WHERE id = 2")
    a.commit()
    try:
        b.commit()
        raise AssertionError("both conflicting commits were accepted")
    except errors.SerializationFailure as e:
        assert e.sqlstate == "40001"
    assert b.info.transaction_status == TS.IDLE, b.info.transaction_status
    for attempt in range(5):
        try:
            (bal,) = b.execute("SELECT balance FROM acct WHERE id = 2").fetchone()
            b.execute("UPDATE acct SET balance = %s WHERE id = 2", (bal + 2,))
            b.commit()
            break
        except errors.SerializationFailure:
            b.rollback()
    else:
        raise AssertionError("the retry never committed")
    assert b.execute("SELECT balance FROM acct WHERE id = 2").fetchone() == (33,)
    b.commit()
    # Read-only blocks and SERIALIZABLE.
    b.read_only = True
    try:
        b.execute("DELETE FROM acct")
        raise AssertionError("a write in a read-only block was accepted")
    except errors.ReadOnlySqlTransaction:
        pass
    b.rollback()
    b.read_only = None
    b.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    assert b.execute("SELECT count(*) FROM acct").fetchone() == (2,)
    b.commit()
    b.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
    try:
        b.execute("SELECT 1")
        raise AssertionError("SERIALIZABLE was accepted")
    except errors.FeatureNotSupported as e:
        assert "SERIALIZABLE" in str(e), str(e)

try:
    psycopg.connect(**{**dsn, "password": password + "x"})
    raise AssertionError("a wrong password was accepted")
except psycopg.OperationalError as e:
    assert "password authentication failed" in str(e).lower(), str(e)

print("psycopg checks passed")
