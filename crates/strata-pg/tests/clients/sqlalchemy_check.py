"""SQLAlchemy's reflection of a strata database through its PostgreSQL dialect (psycopg 3):
python sqlalchemy_check.py HOST PORT PASSWORD.

The inspector reads strata's pg_catalog (tables, views, columns with their types and
nullability, primary keys, indexes), with SQLAlchemy's defaults (a transaction per connection,
inside which psycopg looks types up between SAVEPOINT and RELEASE), and MetaData.reflect builds
Table objects that then write and read rows. Run by crates/strata-pg/tests/clients.rs; exits
non-zero (with a traceback) on the first failed check.
"""

import sys

import sqlalchemy as sa

host, port, password = sys.argv[1], int(sys.argv[2]), sys.argv[3]
url = sa.URL.create("postgresql+psycopg", username="strata", password=password, host=host, port=port, database="app")
engine = sa.create_engine(url)
# strata changes tables outside transaction blocks: DDL runs in autocommit.
ddl = engine.execution_options(isolation_level="AUTOCOMMIT")

with ddl.connect() as conn:
    for stmt in [
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, cust INT NOT NULL, total DOUBLE PRECISION, "
        "code VARCHAR(20), c CHAR(3), d DATE, ts TIMESTAMP, tz TIMESTAMPTZ, flag BOOLEAN, b BYTEA)",
        "CREATE TABLE pairs (a INT, b TEXT, v BIGINT, PRIMARY KEY (a, b))",
        "CREATE TABLE nokey (x INT, y TEXT)",
    ]:
        conn.exec_driver_sql(stmt)
    conn.exec_driver_sql("CREATE INDEX orders_cust ON orders (cust, total)")
    conn.exec_driver_sql("CREATE UNIQUE INDEX pairs_v ON pairs (v)")
    conn.exec_driver_sql("CREATE VIEW big AS SELECT id, cust FROM orders WHERE cust > 5")

insp = sa.inspect(engine)
assert sorted(insp.get_table_names()) == ["nokey", "orders", "pairs"], insp.get_table_names()
assert insp.get_view_names() == ["big"], insp.get_view_names()
assert insp.has_table("orders") and not insp.has_table("missing")

columns = {c["name"]: c for c in insp.get_columns("orders")}
assert list(columns) == ["id", "cust", "total", "code", "c", "d", "ts", "tz", "flag", "b"], list(columns)
expected = {
    "id": sa.BIGINT,
    "cust": sa.INTEGER,
    "total": sa.DOUBLE_PRECISION,
    "code": sa.VARCHAR,
    "c": sa.CHAR,
    "d": sa.DATE,
    "ts": sa.TIMESTAMP,
    "tz": sa.TIMESTAMP,
    "flag": sa.BOOLEAN,
    "b": sa.dialects.postgresql.BYTEA,
}
for name, cls in expected.items():
    assert isinstance(columns[name]["type"], cls), (name, columns[name]["type"])
assert columns["code"]["type"].length == 20 and columns["c"]["type"].length == 3
assert columns["tz"]["type"].timezone and not columns["ts"]["type"].timezone
assert not columns["id"]["nullable"] and not columns["cust"]["nullable"] and columns["total"]["nullable"]
assert [c["name"] for c in insp.get_columns("big")] == ["id", "cust"]

assert insp.get_pk_constraint("orders") == {
    "constrained_columns": ["id"],
    "name": "orders_pkey",
    "comment": None,
    "dialect_options": {"postgresql_include": []},
}, insp.get_pk_constraint("orders")
assert insp.get_pk_constraint("pairs")["constrained_columns"] == ["a", "b"]
# A table without a primary key has none (its hidden row id is not a column).
assert insp.get_pk_constraint("nokey")["constrained_columns"] == []
assert [c["name"] for c in insp.get_columns("nokey")] == ["x", "y"]

indexes = {i["name"]: i for i in insp.get_indexes("orders")}
assert list(indexes) == ["orders_cust"], indexes
assert indexes["orders_cust"]["column_names"] == ["cust", "total"] and not indexes["orders_cust"]["unique"]
(pairs_v,) = insp.get_indexes("pairs")
assert pairs_v["name"] == "pairs_v" and pairs_v["unique"] and pairs_v["column_names"] == ["v"], pairs_v
assert insp.get_foreign_keys("orders") == [] and insp.get_unique_constraints("pairs") == []

metadata = sa.MetaData()
metadata.reflect(engine)
assert sorted(metadata.tables) == ["nokey", "orders", "pairs"], sorted(metadata.tables)
orders = metadata.tables["orders"]
assert [c.name for c in orders.primary_key.columns] == ["id"]
with engine.begin() as conn:
    conn.execute(sa.insert(orders), [{"id": 1, "cust": 7, "code": "a"}, {"id": 2, "cust": 9, "code": "b"}])
with engine.connect() as conn:
    rows = conn.execute(sa.select(orders.c.id, orders.c.code).where(orders.c.cust > 8)).all()
    assert rows == [(2, "b")], rows

print("sqlalchemy checks passed")
