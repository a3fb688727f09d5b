"""psycopg 3 against a running strata server: python psycopg_check.py HOST PORT PASSWORD.

Run by crates/strata-pg/tests/clients.rs; exits non-zero (with a traceback) on the first
failed check.
"""

import sys

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

# Without autocommit psycopg opens a transaction, which strata refuses clearly.
with psycopg.connect(**dsn) as conn:
    try:
        conn.execute("SELECT 1")
        raise AssertionError("a transaction was accepted")
    except errors.FeatureNotSupported as e:
        assert "autocommit" in str(e), str(e)

try:
    psycopg.connect(**{**dsn, "password": password + "x"})
    raise AssertionError("a wrong password was accepted")
except psycopg.OperationalError as e:
    assert "password authentication failed" in str(e).lower(), str(e)

print("psycopg checks passed")
