"""DuckDB for strata-bench: serves one database file to the benchmark over a Unix socket.

strata-bench runs this with the Python that has the `duckdb` wheel (scripts/install-peers.sh
makes a virtual environment with duckdb and pyarrow). Usage:

    python duckdb_peer.py DATABASE SOCKET

Each connection to SOCKET gets its own thread and DuckDB cursor. Requests and replies are one
JSON object per line:

    {"op": "ping"}                                  -> {"ok": null}
    {"op": "exec", "sql": S, "params": [...]}       -> {"ok": [[...], ...]}   (all result rows)
    {"op": "text", "sql": S}                        -> {"ok": [["...", ...], ...]}
        (all result rows, each value as Python's str() of it, NULL as "")
    {"op": "rows", "sql": S}                        -> {"ok": [count, key_sum]}
        (the whole result is fetched as an Arrow table; column 0 is summed)
    {"op": "load", "table": T, "columns": [[...], ...]} -> {"ok": null}
        (column-major values, inserted in one statement through an Arrow table)
    {"op": "version"}                               -> {"ok": "1.5.5"}
    {"op": "txn", "get": S, "reads": [k, ...], "counter": C,
     "writes": [{"key": k, "sql": U, "params": [...]}, ...]} -> {"ok": true | false}
        (one transaction: S with each read key; then each U with its params, the counter
        column C of that key's row as read plus 1, and the key; false when DuckDB aborted
        it on a conflict, which rolls it back)

Values JSON has no form for (timestamps, decimals) are sent as their str(). Errors come back as {"error": "..."}; the server stops when the benchmark closes the socket it
was started with (the first connection).
"""

import json
import os
import socket
import sys
import threading

import duckdb
import pyarrow as pa
import pyarrow.compute as pc


def update_txn(cur, req):
    """Runs the `txn` op; False when DuckDB aborts it on a write-write conflict."""
    cur.execute("BEGIN TRANSACTION")
    try:
        rows = {}
        for k in req["reads"]:
            row = cur.execute(req["get"], [k]).fetchone()
            if row is None:
                raise ValueError(f"row {k} is missing")
            rows[k] = row
        for w in req["writes"]:
            count = rows[w["key"]][req["counter"]] + 1
            cur.execute(w["sql"], list(w["params"]) + [count, w["key"]])
        cur.execute("COMMIT")
        return True
    except Exception as e:
        try:
            cur.execute("ROLLBACK")
        except Exception:
            pass  # a failed COMMIT has rolled back already
        if "conflict" in str(e).lower():
            return False
        raise


def serve(conn, cur, stop_when_closed):
    reader = conn.makefile("r", encoding="utf-8")
    writer = conn.makefile("w", encoding="utf-8")
    for line in reader:
        try:
            req = json.loads(line)
            op = req["op"]
            if op == "ping":
                out = None
            elif op == "version":
                out = duckdb.__version__
            elif op == "exec":
                out = [list(r) for r in cur.execute(req["sql"], req.get("params") or []).fetchall()]
            elif op == "text":
                rows = cur.execute(req["sql"]).fetchall()
                out = [["" if v is None else str(v) for v in r] for r in rows]
            elif op == "txn":
                out = update_txn(cur, req)
            elif op == "rows":
                result = cur.execute(req["sql"])
                fetch = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
                table = fetch()
                key_sum = pc.sum(table.column(0)).as_py() if table.num_rows else 0
                out = [table.num_rows, key_sum or 0]
            elif op == "load":
                batch = pa.table({f"c{i}": col for i, col in enumerate(req["columns"])})
                cur.register("incoming", batch)
                cur.execute(f"INSERT INTO {req['table']} SELECT * FROM incoming")
                cur.unregister("incoming")
                out = None
            else:
                raise ValueError(f"unknown op {op!r}")
            reply = {"ok": out}
        except Exception as e:  # the benchmark reports it and refuses the system
            reply = {"error": f"{type(e).__name__}: {e}"}
        writer.write(json.dumps(reply, default=str) + "\n")
        writer.flush()
    conn.close()
    if stop_when_closed:
        os._exit(0)


def main():
    database, path = sys.argv[1], sys.argv[2]
    db = duckdb.connect(database)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    first = True
    while True:
        conn, _ = server.accept()
        t = threading.Thread(target=serve, args=(conn, db.cursor(), first), daemon=True)
        t.start()
        first = False


if __name__ == "__main__":
    main()
