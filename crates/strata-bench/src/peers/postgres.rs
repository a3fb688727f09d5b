//! PostgreSQL (Debian's 15) as a YCSB store, on a private cluster: `initdb --auth=trust` in a
//! directory under `--out` (as the `postgres` user when running as root, which initdb refuses),
//! started with `pg_ctl` listening on 127.0.0.1 at a free port and stopped when the store is
//! dropped. `synchronous_commit=off` matches strata's default (a WAL write without fsync per
//! operation). Driven through the `postgres` crate, one connection behind a mutex.

use std::path::{Path, PathBuf};
use std::process::Command;

use parking_lot::Mutex;
use postgres::{Client, NoTls, Statement};

use crate::ycsb::Store;

/// The configuration, as reported next to the figures.
pub(crate) const CONFIG: &str = "synchronous_commit=off, fsync=on, shared_buffers=64MB";

/// Where Debian puts the server binaries (override with `PG_BIN`).
fn bin(name: &str) -> PathBuf {
    let dir = std::env::var("PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    Path::new(&dir).join(name)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Runs a server binary, as the `postgres` user when we are root.
fn run(name: &str, args: &[&str]) -> Result<(), String> {
    let program = bin(name);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&program);
        c
    } else {
        Command::new(&program)
    };
    let out = cmd.args(args).output().map_err(|e| format!("postgres: cannot run {}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "postgres: {} {} failed: {}{}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// A private cluster, stopped on drop.
struct Cluster {
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    fn start(dir: &Path) -> Result<Cluster, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("postgres: {e}"))?;
        let dir = dir.canonicalize().map_err(|e| format!("postgres: {e}"))?;
        if is_root() {
            let owned = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status();
            if !owned.is_ok_and(|s| s.success()) {
                return Err("postgres: cannot give the cluster directory to the postgres user".into());
            }
        }
        let data = dir.join("data");
        let data_s = data.to_string_lossy().into_owned();
        run("initdb", &["-D", &data_s, "--auth=trust", "-U", "postgres", "-E", "UTF8"])?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("postgres: no free port: {e}"))?;
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={} -c synchronous_commit=off -c fsync=on \
             -c shared_buffers=64MB",
            dir.display()
        );
        let log = dir.join("server.log").to_string_lossy().into_owned();
        run("pg_ctl", &["-D", &data_s, "-o", &opts, "-l", &log, "-w", "start"])?;
        Ok(Cluster { dir, port })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data").to_string_lossy().into_owned();
        let _ = run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
    }
}

struct Conn {
    client: Client,
    insert: Statement,
    read: Statement,
    updates: Vec<Statement>,
    scan: Statement,
}

pub(crate) struct PostgresStore {
    conn: Mutex<Conn>,
    fields: usize,
    // Dropped last: the server outlives the connection.
    _cluster: Cluster,
}

fn err(e: postgres::Error) -> String {
    format!("postgres: {e}")
}

impl PostgresStore {
    pub(crate) fn open(dir: &Path, fields: usize) -> Result<Self, String> {
        let cluster = Cluster::start(dir)?;
        let mut client =
            Client::connect(&format!("host=127.0.0.1 port={} user=postgres", cluster.port), NoTls).map_err(err)?;
        let cols: Vec<String> = (0..fields).map(|f| format!("field{f} BYTEA")).collect();
        client
            .batch_execute(&format!("CREATE TABLE usertable (k BIGINT PRIMARY KEY, {})", cols.join(", ")))
            .map_err(err)?;
        let marks: Vec<String> = (1..=fields + 1).map(|i| format!("${i}")).collect();
        let sets: Vec<String> = (0..fields).map(|f| format!("field{f} = EXCLUDED.field{f}")).collect();
        let insert = client
            .prepare(&format!(
                "INSERT INTO usertable VALUES ({}) ON CONFLICT (k) DO UPDATE SET {}",
                marks.join(", "),
                sets.join(", ")
            ))
            .map_err(err)?;
        let read = client.prepare("SELECT * FROM usertable WHERE k = $1").map_err(err)?;
        let updates = (0..fields)
            .map(|f| client.prepare(&format!("UPDATE usertable SET field{f} = $1 WHERE k = $2")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let scan = client.prepare("SELECT k FROM usertable WHERE k >= $1 ORDER BY k LIMIT $2").map_err(err)?;
        Ok(PostgresStore { conn: Mutex::new(Conn { client, insert, read, updates, scan }), fields, _cluster: cluster })
    }
}

impl Store for PostgresStore {
    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String> {
        let k = key as i64;
        let mut values: Vec<&(dyn postgres::types::ToSql + Sync)> = Vec::with_capacity(fields.len() + 1);
        values.push(&k);
        for f in fields {
            values.push(f);
        }
        let c = &mut *self.conn.lock();
        c.client.execute(&c.insert, &values).map_err(err)?;
        Ok(())
    }

    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String> {
        let c = &mut *self.conn.lock();
        let rows = c.client.query(&c.read, &[&(key as i64)]).map_err(err)?;
        Ok(rows
            .first()
            .map(|r| (0..self.fields).map(|f| r.get::<_, Option<Vec<u8>>>(f + 1).unwrap_or_default()).collect()))
    }

    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String> {
        let c = &mut *self.conn.lock();
        let st = c.updates.get(field).ok_or_else(|| format!("postgres: no field {field}"))?.clone();
        c.client.execute(&st, &[&value, &(key as i64)]).map_err(err)?;
        Ok(())
    }

    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String> {
        let c = &mut *self.conn.lock();
        let rows = c.client.query(&c.scan, &[&(start as i64), &(n as i64)]).map_err(err)?;
        Ok(rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect())
    }
}
