"""TPC-H on DuckDB for `strata-bench tpch` (written next to the run's data and started by it).

Creates the eight tables with the tpch extension's schema (DECIMAL money, DATE dates), loads them
from the text files strata-bench wrote (`<table>.<part>.tbl`, the rows strata loads), runs each
query of a file `runs` times and writes one JSON document: the load's seconds and, per query,
the times in milliseconds and the first run's rows as text (the reference the other systems'
rows are checked against).
"""

import argparse
import datetime
import decimal
import glob
import json
import os
import sys
import threading
import time

import duckdb


def extension_path():
    try:
        import duckdb_extension_tpch
    except ImportError:
        sys.exit("the tpch extension is missing: pip install duckdb-extension-tpch==" + duckdb.__version__)
    base = os.path.dirname(duckdb_extension_tpch.__file__)
    found = glob.glob(os.path.join(base, "**", "tpch.duckdb_extension"), recursive=True)
    if not found:
        sys.exit(f"no tpch.duckdb_extension under {base}")
    return found[0]


def text(v):
    if v is None:
        return ""  # as the reference answers write NULL
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (decimal.Decimal, int)):
        return str(v)
    if isinstance(v, datetime.date):
        return v.isoformat()
    return str(v)


def run_queries(cur, a, doc, label):
    """Runs each query of `a.queries` `a.runs` times on `cur`; records the times, the first
    run's rows and any error in `doc`."""
    with open(a.queries) as f:
        queries = json.load(f)
    for nr, sql in queries:
        times = []
        try:
            for i in range(a.runs):
                t = time.perf_counter()
                rows = cur.execute(sql).fetchall()
                times.append((time.perf_counter() - t) * 1000.0)
                if i == 0:
                    doc["results"][str(nr)] = [[text(v) for v in r] for r in rows]
        except duckdb.Error as e:
            doc["errors"][str(nr)] = str(e)
        doc["times"][str(nr)] = times
        print(f"duckdb: Q{nr} {min(times) if times else float('nan'):.1f} ms{label}", file=sys.stderr, flush=True)


def refresh_function(cur, f, bounds):
    """Applies refresh function `f` in one transaction; returns the rows it wrote. Function f
    works on set (f - 1) // 2, round after round; in round r the set's rows sit 8 * (r % 4) keys
    above the generated ones, and RF1's copies 8 keys further (back to the generated keys after
    the fourth slot), as refresh.rs applies them to strata."""
    n = (f - 1) // 2
    lo, hi = bounds[n % len(bounds)]
    at = 8 * ((n // len(bounds)) % 4)
    to = 8 * ((n // len(bounds) + 1) % 4)
    rows = 0
    cur.execute("BEGIN TRANSACTION")
    for table, k in (("orders", "o_orderkey"), ("lineitem", "l_orderkey")):
        where = f"{k} BETWEEN {lo + at} AND {hi + at} AND {k} % 32 >= {at} AND {k} % 32 < {at + 8}"
        if f % 2 == 1:
            sql = f"INSERT INTO {table} SELECT * REPLACE ({k} + {to - at} AS {k}) FROM {table} WHERE {where}"
        else:
            sql = f"DELETE FROM {table} WHERE {where}"
        rows += cur.execute(sql).fetchone()[0]
    cur.execute("COMMIT")
    return rows


def refresh(con, a, doc):
    """The replay and the throughput run of `--refresh` (see the module's comment)."""
    with open(a.refresh) as f:
        plan = json.load(f)
    bounds = plan["bounds"]
    applied = 0
    cache = {}
    doc["replay"] = {}
    for entry_id, count, sql in plan["replay"]:
        while applied < count:
            applied += 1
            refresh_function(con, applied, bounds)
        key = (count, sql)
        if key not in cache:
            try:
                cache[key] = [[text(v) for v in r] for r in con.execute(sql).fetchall()]
            except duckdb.Error as e:
                cache[key] = str(e)
        doc["replay"][str(entry_id)] = cache[key]
    print(f"duckdb: {len(plan['replay'])} answers computed at {applied} refresh functions", file=sys.stderr)
    if not plan["throughput"]:
        return

    stop = threading.Event()
    done = {"functions": 0, "rows": 0, "error": None}
    last = 2 * plan["pairs"] if plan.get("pairs") is not None else None

    def stream():
        cur = con.cursor()
        f = applied
        try:
            while not stop.is_set() and (last is None or done["functions"] < last):
                f += 1
                done["rows"] += refresh_function(cur, f, bounds)
                done["functions"] += 1
        except duckdb.Error as e:
            done["error"] = str(e)
        done["seconds"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    thread = threading.Thread(target=stream)
    thread.start()
    run_queries(con.cursor(), a, doc, " under refresh")
    stop.set()
    thread.join()
    doc["refresh_seconds"] = done["seconds"]
    doc["refresh_functions"] = done["functions"]
    doc["refresh_rows"] = done["rows"]
    doc["refresh_error"] = done["error"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--tbl", required=True, help="directory of <table>.<part>.tbl files")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--queries", required=True, help="JSON file: [[number, sql], ...]")
    p.add_argument("--out", required=True)
    p.add_argument("--refresh", help="JSON file: the refresh plan (reopens the database --db)")
    a = p.parse_args()

    doc = {"version": duckdb.__version__, "times": {}, "results": {}, "errors": {}}
    con = duckdb.connect(a.db)
    con.execute(f"LOAD '{extension_path()}'")
    con.execute(f"SET threads = {a.threads}")
    if a.refresh:
        refresh(con, a, doc)
        con.close()
        with open(a.out, "w") as f:
            json.dump(doc, f)
        return
    t0 = time.perf_counter()
    con.execute("CALL dbgen(sf = 0)")  # the tables, empty
    for name in sorted(os.listdir(a.tbl)):
        if name.endswith(".tbl"):
            table = name.split(".")[0]
            con.execute(f"COPY {table} FROM '{os.path.join(a.tbl, name)}' (DELIMITER '|', HEADER false)")
    con.execute("CHECKPOINT")
    doc["load_seconds"] = time.perf_counter() - t0
    run_queries(con, a, doc, "")
    con.close()
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
