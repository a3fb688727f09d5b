//! The server against real PostgreSQL clients: the `postgres` crate (extended protocol:
//! prepared statements with parameters, SCRAM and MD5 authentication, SQLSTATE codes) and psql
//! (simple protocol), each on a server started on a free loopback port. `wire_types` checks
//! every type of value in text and binary format against what `strata sql` computes, and
//! `slt_protocols` runs the project's .slt files through sqllogictest's PostgreSQL engines.

/// The allocator notes each thread's largest allocation, which the fuzz replays check.
#[global_allocator]
static ALLOC: strata::fuzz::TrackingAlloc = strata::fuzz::TrackingAlloc;

mod elle_pg;
mod fuzz;
mod psql_catalog;
mod row_locks;
mod slt_protocols;
mod txn_status;
mod wire_types;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use postgres::error::SqlState;
use postgres::{Client, NoTls, SimpleQueryMessage};
use strata_pg::{AuthMethod, Config, Server};

/// A server on a background runtime, stopped when dropped.
struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(configure: impl FnOnce(&mut Config)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(strata::Db::open(dir.path(), strata::Options::default()).unwrap());
    let mut running = start_on(strata_sql::SqlEngine::new(db).unwrap(), configure);
    running._dir = Some(dir);
    running
}

/// A server over `engine`'s database (which the caller keeps open).
fn start_on(engine: strata_sql::SqlEngine, configure: impl FnOnce(&mut Config)) -> Running {
    let mut config = Config::new("127.0.0.1:0".parse().unwrap());
    configure(&mut config);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let server = Server::bind(engine, config).await.unwrap();
            addr_tx.send(server.local_addr().unwrap()).unwrap();
            server
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
    });
    let addr = addr_rx.recv().unwrap();
    Running { addr, stop: Some(stop_tx), thread: Some(thread), _dir: None }
}

fn connect(addr: SocketAddr, user: &str, password: &str) -> Result<Client, postgres::Error> {
    Client::connect(
        &format!("host={} port={} user={user} password={password} dbname=whatever", addr.ip(), addr.port()),
        NoTls,
    )
}

/// The error of a connection attempt that must fail.
fn refused(addr: SocketAddr, user: &str, password: &str) -> postgres::Error {
    match connect(addr, user, password) {
        Ok(_) => panic!("{user} with password {password:?} was let in"),
        Err(e) => e,
    }
}

#[test]
fn extended_protocol_runs_ddl_dml_and_prepared_statements_with_row_counts() {
    let server = start(|c| c.password = Some("s3cret".into()));
    let mut client = connect(server.addr, "strata", "s3cret").unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, n INT NOT NULL, s TEXT, x DOUBLE) WITH (engine = 'lineage')",
        )
        .unwrap();
    let insert = client.prepare("INSERT INTO t VALUES ($1, $2, $3, $4)").unwrap();
    for i in 0..10i64 {
        let s = if i % 3 == 0 { None } else { Some(format!("s{i}")) };
        let n = client.execute(&insert, &[&i, &(i as i32 * 10), &s, &(i as f64 / 2.0)]).unwrap();
        assert_eq!(n, 1);
    }
    assert_eq!(client.execute("INSERT INTO t VALUES (100, 1, 'a', 0), (101, 2, 'b', 0)", &[]).unwrap(), 2);
    assert_eq!(client.execute("UPDATE t SET n = n + 1 WHERE id >= $1", &[&5i64]).unwrap(), 7);
    assert_eq!(client.execute("DELETE FROM t WHERE id > 99", &[]).unwrap(), 2);
    assert_eq!(client.execute("DELETE FROM t WHERE id = 12345", &[]).unwrap(), 0);

    let query = client.prepare("SELECT id, n, s, x FROM t WHERE n > $1 ORDER BY id").unwrap();
    let rows = client.query(&query, &[&60i32]).unwrap();
    let got: Vec<(i64, i32, Option<String>, f64)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(
        got,
        vec![(6, 61, None, 3.0), (7, 71, Some("s7".into()), 3.5), (8, 81, Some("s8".into()), 4.0), (9, 91, None, 4.5)]
    );
    // The same prepared statement again, with another parameter.
    assert_eq!(client.query(&query, &[&85i32]).unwrap().len(), 1);
    let one = client.query_one("SELECT count(*) AS c, sum(n) FROM t WHERE s IS NOT NULL", &[]).unwrap();
    assert_eq!(one.get::<_, i64>("c"), 6);

    // Errors carry SQLSTATE codes, and a failed statement changes nothing.
    let e = client.execute("INSERT INTO t VALUES (1, 0, 'dup', 0)", &[]).unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNIQUE_VIOLATION), "{e}");
    let e = client.execute("SELECT * FROM missing", &[]).unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_TABLE), "{e}");
    let e = client.batch_execute("SELEC 1").unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::SYNTAX_ERROR), "{e}");
    assert_eq!(client.query_one("SELECT count(*) FROM t", &[]).unwrap().get::<_, i64>(0), 10);

    // The simple protocol: several statements, command tags with row counts.
    let msgs = client.simple_query("UPDATE t SET s = 'z' WHERE id < 3; SELECT s FROM t WHERE id = 1").unwrap();
    assert!(matches!(msgs[0], SimpleQueryMessage::CommandComplete(3)), "{:?}", msgs.len());
    let values: Vec<Option<String>> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
            _ => None,
        })
        .collect();
    assert_eq!(values, vec![Some("z".to_string())]);

    // Another connection is another session over the same data.
    let mut other = connect(server.addr, "strata", "s3cret").unwrap();
    assert_eq!(other.query_one("SELECT n FROM t WHERE id = 9", &[]).unwrap().get::<_, i32>(0), 91);
}

#[test]
fn wrong_passwords_and_users_are_refused() {
    for auth in [AuthMethod::Scram, AuthMethod::Md5] {
        let server = start(|c| {
            c.password = Some("right".into());
            c.auth = auth;
        });
        let e = refused(server.addr, "strata", "wrong");
        assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{auth:?}: {e}");
        let e = refused(server.addr, "mallory", "right");
        assert_eq!(e.code(), Some(&SqlState::INVALID_PASSWORD), "{auth:?}: {e}");
        let mut ok = connect(server.addr, "strata", "right").unwrap();
        assert_eq!(ok.query_one("SELECT 1 + 1", &[]).unwrap().get::<_, i64>(0), 2);
    }
}

#[test]
fn a_non_loopback_address_needs_allow_remote_and_connections_are_bounded() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(strata::Db::open(dir.path(), strata::Options::default()).unwrap());
    let engine = strata_sql::SqlEngine::new(db).unwrap();
    let e = rt
        .block_on(Server::bind(engine, Config::new("0.0.0.0:0".parse().unwrap())))
        .err()
        .expect("a wildcard address without allow_remote must be refused");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("--listen-any"), "{e}");

    let server = start(|c| c.max_connections = 1);
    let mut first = connect(server.addr, "strata", "").unwrap();
    let e = refused(server.addr, "strata", "");
    assert_eq!(e.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{e}");
    first.batch_execute("SELECT 1").unwrap();
    drop(first);
    // The slot is free again once the first client left.
    let mut again = None;
    for _ in 0..50 {
        match connect(server.addr, "strata", "") {
            Ok(c) => {
                again = Some(c);
                break;
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    again.expect("a connection after the first closed").batch_execute("SELECT 1").unwrap();
}

fn psql(addr: SocketAddr, password: &str, args: &[&str]) -> Option<(bool, String, String)> {
    let out = Command::new("psql")
        .arg(format!("postgresql://strata@{}:{}/strata", addr.ip(), addr.port()))
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .args(args)
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .ok()?;
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn psql_runs_statements_and_reports_errors() {
    let server = start(|c| c.password = Some("pw".into()));
    let Some((ok, out, err)) = psql(server.addr, "pw", &["-c", "SELECT 41 + 1"]) else {
        // .ci/run installs postgresql-client and sets STRATA_REQUIRE_CLIENTS; elsewhere psql
        // may be missing.
        assert!(std::env::var_os("STRATA_REQUIRE_CLIENTS").is_none(), "psql is not installed");
        eprintln!("psql not found; skipping the psql checks");
        return;
    };
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "42");
    let (ok, out, err) = psql(
        server.addr,
        "pw",
        &[
            "-c",
            "CREATE TABLE t (id INT PRIMARY KEY, s TEXT)",
            "-c",
            "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, NULL)",
            "-c",
            "UPDATE t SET s = 'c' WHERE id >= 2",
            "-c",
            "SELECT id, s FROM t ORDER BY id",
        ],
    )
    .unwrap();
    assert!(ok, "{err}");
    assert_eq!(out, "1|a\n2|c\n3|c\n");
    // Command tags as psql prints them (without -t).
    let out = Command::new("psql")
        .arg(format!("postgresql://strata@{}:{}/strata", server.addr.ip(), server.addr.port()))
        .args(["-X", "-c", "DELETE FROM t WHERE id = 3", "-c", "INSERT INTO t VALUES (9, 'z')"])
        .env("PGPASSWORD", "pw")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "DELETE 1\nINSERT 0 1\n");
    let (ok, _, err) = psql(server.addr, "pw", &["-c", "INSERT INTO t VALUES (1, 'dup')"]).unwrap();
    assert!(!ok && err.contains("duplicate key (1)"), "{err}");
    let (ok, _, err) = psql(server.addr, "nope", &["-c", "SELECT 1"]).unwrap();
    assert!(!ok && err.to_lowercase().contains("password authentication failed"), "{err}");
}

/// psql in one session: a committed and a rolled-back block, a failed statement inside a block
/// (25P02 after it, COMMIT answering ROLLBACK), and a conflict with another connection (run with
/// psql's `\!` in the middle of the session) followed by a retry that commits.
#[test]
fn psql_runs_transaction_blocks_a_failed_block_and_a_conflict_retry() {
    let server = start(|_| {});
    let url = format!("postgresql://strata@{}:{}/strata", server.addr.ip(), server.addr.port());
    let Some((ok, _, err)) = psql(server.addr, "", &["-c", "CREATE TABLE t (id INT PRIMARY KEY, n INT)"]) else {
        assert!(std::env::var_os("STRATA_REQUIRE_CLIENTS").is_none(), "psql is not installed");
        eprintln!("psql not found; skipping the psql checks");
        return;
    };
    assert!(ok, "{err}");
    let other = format!("\\! psql -X -q '{url}' -c 'UPDATE t SET n = n + 100 WHERE id = 1'");
    let steps = [
        "INSERT INTO t VALUES (1, 0), (2, 0)",
        "BEGIN",
        "UPDATE t SET n = n + 1 WHERE id = 1",
        "COMMIT",
        "BEGIN",
        "DELETE FROM t",
        "ROLLBACK",
        "BEGIN",
        "UPDATE t SET n = 50 WHERE id = 2",
        "INSERT INTO t VALUES (1, 9)",
        "SELECT 1",
        "COMMIT",
        // Under READ COMMITTED the other connection would wait for this block's row.
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        "UPDATE t SET n = n + 10 WHERE id = 1",
        &other,
        "COMMIT",
        "BEGIN",
        "UPDATE t SET n = n + 10 WHERE id = 1",
        "COMMIT",
        "SELECT id, n FROM t ORDER BY id",
    ];
    let mut args = vec!["-v", "ON_ERROR_STOP=0", "-v", "VERBOSITY=verbose", "-e"];
    for s in &steps {
        args.push("-c");
        args.push(s);
    }
    let (ok, out, err) = psql(server.addr, "", &args).unwrap();
    assert!(ok, "{err}");
    // The errors, in order, with their SQLSTATEs: the duplicate key, the failed block, the conflict.
    let codes: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("ERROR:  ")).map(|l| &l[..5]).collect();
    assert_eq!(codes, ["23505", "25P02", "40001"], "{err}");
    // Row 1: 1 from the first block, 100 from the other connection, 10 from the retry; row 2
    // untouched by the failed block.
    assert!(out.ends_with("1|111\n2|0\n"), "{out}");
}

/// Runs a client check program (`tests/clients/*`) against a fresh password-protected server:
/// `program args... HOST PORT PASSWORD`. The program names its failure and exits non-zero.
/// `None` when the client is not set up here (see the environment variables below).
fn client_check(mut cmd: Command) {
    let server = start(|c| c.password = Some("secret pw".into()));
    let out = cmd
        .args([server.addr.ip().to_string(), server.addr.port().to_string(), "secret pw".into()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client check failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("checks passed"), "{stdout}\n{stderr}");
}

/// The value of `var`, or `None` (and a note) when the client it names is not set up; under
/// `STRATA_REQUIRE_CLIENTS` (set by `.ci/run`, which sets the client variables up too) a
/// missing client fails the test instead.
fn client_env(var: &str) -> Option<std::ffi::OsString> {
    let value = std::env::var_os(var).filter(|v| !v.is_empty());
    if value.is_none() {
        assert!(std::env::var_os("STRATA_REQUIRE_CLIENTS").is_none(), "{var} is not set");
        eprintln!("{var} not set; skipping this client's checks");
    }
    value
}

#[test]
fn psycopg_runs_ddl_dml_prepared_statements_and_is_refused_a_wrong_password() {
    // A Python interpreter with psycopg 3 installed.
    let Some(python) = client_env("STRATA_PSYCOPG_PYTHON") else { return };
    let mut cmd = Command::new(python);
    cmd.arg("tests/clients/psycopg_check.py");
    client_check(cmd);
}

/// SQLAlchemy's inspector and `MetaData.reflect` over strata's pg_catalog, with the same
/// interpreter (SQLAlchemy installed beside psycopg).
#[test]
fn sqlalchemy_reflects_tables_columns_keys_and_indexes() {
    let Some(python) = client_env("STRATA_PSYCOPG_PYTHON") else { return };
    let mut cmd = Command::new(python);
    cmd.arg("tests/clients/sqlalchemy_check.py");
    client_check(cmd);
}

#[test]
fn pgjdbc_runs_ddl_dml_prepared_statements_and_is_refused_a_wrong_password() {
    // The path of pgjdbc's jar (org.postgresql:postgresql).
    let Some(jar) = client_env("STRATA_PGJDBC_JAR") else { return };
    let mut cmd = Command::new("java");
    cmd.arg("-cp").arg(jar).arg("tests/clients/JdbcCheck.java");
    client_check(cmd);
}

#[test]
fn a_client_killed_mid_statement_leaves_it_whole_or_not_applied() {
    let server = start(|c| c.password = Some("pw".into()));
    let mut client = connect(server.addr, "strata", "pw").unwrap();
    let n = 100_000;
    client
        .batch_execute(&format!(
            "CREATE TABLE src (id BIGINT PRIMARY KEY, v BIGINT); CREATE TABLE dst (id BIGINT PRIMARY KEY, v BIGINT);
             INSERT INTO src SELECT g, g * 2 FROM generate_series(1, {n}) AS g"
        ))
        .unwrap();
    let Some(mut child) = Command::new("psql")
        .arg(format!("postgresql://strata@{}:{}/strata", server.addr.ip(), server.addr.port()))
        .args(["-X", "-q", "-c", "INSERT INTO dst SELECT id, v FROM src"])
        .env("PGPASSWORD", "pw")
        .spawn()
        .ok()
    else {
        assert!(std::env::var_os("STRATA_REQUIRE_CLIENTS").is_none(), "psql is not installed");
        eprintln!("psql not found; skipping");
        return;
    };
    // Kill psql while the statement runs (the INSERT checks each key first, so it takes a
    // while); the server notices the closed connection but lets the statement finish or not
    // start, never stop halfway.
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    // Every state readers see is all or nothing; poll until the statement has landed (or
    // clearly never reached the server).
    let count = |c: &mut Client| -> i64 { c.query_one("SELECT count(*) FROM dst", &[]).unwrap().get(0) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = count(&mut client);
    while seen != n && std::time::Instant::now() < deadline {
        assert_eq!(seen, 0, "{seen} of {n} rows applied");
        std::thread::sleep(std::time::Duration::from_millis(50));
        seen = count(&mut client);
    }
    assert!(seen == 0 || seen == n, "{seen} of {n} rows applied");
    let sum: i64 = client.query_one("SELECT coalesce(sum(v), 0) FROM dst", &[]).unwrap().get(0);
    assert_eq!(sum, if seen == 0 { 0 } else { n * (n + 1) });
}

/// `COPY ... FROM STDIN` through the copy-in sub-protocol (the `postgres` crate's `copy_in`,
/// as pgbench and psql's `\copy` use it): rows into a keyless table and a keyed one, in text and
/// CSV; a COPY with a bad field inserts nothing and leaves the connection usable; inside a
/// block it commits and rolls back with the block; and a COPY the client abandons fails.
#[test]
fn copy_from_stdin_takes_rows_all_or_none_in_and_out_of_blocks() {
    use std::io::Write;
    let server = start(|_| {});
    let mut client = connect(server.addr, "strata", "").unwrap();
    client
        .batch_execute("CREATE TABLE h (a INT, b TEXT, c CHAR(4)); CREATE TABLE k (id INT PRIMARY KEY, s TEXT)")
        .unwrap();
    let count =
        |c: &mut Client, t: &str| c.query_one(&format!("SELECT count(*) FROM {t}"), &[]).unwrap().get::<_, i64>(0);

    let mut w = client.copy_in("COPY h FROM STDIN").unwrap();
    for i in 0..1000 {
        writeln!(w, "{}\ttext {i}\\twith a tab\t{}", i % 10, if i % 2 == 0 { "\\N" } else { "ab  " }).unwrap();
    }
    assert_eq!(w.finish().unwrap(), 1000);
    assert_eq!(count(&mut client, "h"), 1000);
    let row = client.query_one("SELECT b, c FROM h WHERE a = 1 AND b = 'text 1\twith a tab'", &[]).unwrap();
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("ab"));

    let mut w = client.copy_in("COPY k (s, id) FROM STDIN WITH (FORMAT csv, HEADER true)").unwrap();
    w.write_all(b"s,id\n\"x,y\",1\n,2\n").unwrap();
    assert_eq!(w.finish().unwrap(), 2);

    // A bad field: nothing inserted, the error names the line, the connection goes on.
    let mut w = client.copy_in("COPY k FROM STDIN").unwrap();
    w.write_all(b"3\tfine\nfour\tbad\n").unwrap();
    let e = w.finish().unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INVALID_TEXT_REPRESENTATION), "{e}");
    let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(message.contains("line 2"), "{message}");
    assert_eq!(count(&mut client, "k"), 2);
    // A duplicate key refuses the whole COPY too.
    let mut w = client.copy_in("COPY k FROM STDIN").unwrap();
    w.write_all(b"5\tnew\n1\tdup\n").unwrap();
    assert_eq!(w.finish().unwrap_err().code(), Some(&SqlState::UNIQUE_VIOLATION));
    assert_eq!(count(&mut client, "k"), 2);

    // In a block: rolled back with it, then committed with it.
    client.batch_execute("BEGIN").unwrap();
    let mut w = client.copy_in("COPY k FROM STDIN").unwrap();
    w.write_all(b"10\tin a block\n").unwrap();
    assert_eq!(w.finish().unwrap(), 1);
    assert_eq!(count(&mut client, "k"), 3, "the block sees its own COPY");
    client.batch_execute("ROLLBACK").unwrap();
    assert_eq!(count(&mut client, "k"), 2);
    let mut tx = client.transaction().unwrap();
    let mut w = tx.copy_in("COPY k FROM STDIN").unwrap();
    w.write_all(b"11\tcommitted\n").unwrap();
    w.finish().unwrap();
    tx.commit().unwrap();
    assert_eq!(count(&mut client, "k"), 3);

    // A COPY whose client gives up (the writer dropped unfinished sends CopyFail).
    let mut w = client.copy_in("COPY k FROM STDIN").unwrap();
    w.write_all(b"12\tabandoned\n").unwrap();
    drop(w);
    assert_eq!(count(&mut client, "k"), 3);
}
