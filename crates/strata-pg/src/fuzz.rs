//! The server's fuzz target (see [`strata::fuzz`]): arbitrary bytes sent by a client, after a
//! valid startup message or in its place. The server must answer or close the connection,
//! never hang on it, and go on serving the next client; the database it serves is in memory
//! and lives as long as the process, so what one input creates the next may find.
//!
//! A panic on the server's threads ends only that connection ([`crate::Server::run`] catches
//! it): pgwire's decoder panics on some malformed messages (a Parse whose parameter types run
//! past its end). Such panics are printed, not reported as crashes; the next input finds out
//! whether the server still serves.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use strata::fuzz::Target;
use strata::vfs::FaultFs;

use crate::{Config, Server};

/// The server's targets.
pub fn targets() -> Vec<Target> {
    vec![Target { name: "pg_messages", run: pg_messages, seeds }]
}

/// How long the server may take to answer an input and close.
const HANG: Duration = Duration::from_secs(15);

/// The address of the process's server, started on first use.
fn server() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            contain_server_panics();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name(SERVER_THREAD)
                .enable_all()
                .build()
                .expect("a runtime for the fuzzed server");
            rt.block_on(async move {
                let opts = strata::Options { fs: Arc::new(FaultFs::new()), ..strata::Options::default() };
                let db = strata::Db::open("/fuzz", opts).expect("a database in memory opens");
                let engine = strata_sql::SqlEngine::new(Arc::new(db)).expect("the SQL engine starts");
                let server = Server::bind(engine, Config::new(SocketAddr::from(([127, 0, 0, 1], 0))))
                    .await
                    .expect("the fuzzed server binds a loopback port");
                let _ = tx.send(server.local_addr().expect("a bound server has an address"));
                let _ = server.run(std::future::pending()).await;
            });
        });
        rx.recv().expect("the fuzzed server started")
    })
}

/// The name of the fuzzed server's threads.
const SERVER_THREAD: &str = "fuzzed-pg-server";

/// Panics on the server's threads are printed; the panic hook in place before
/// (libFuzzer's aborts) handles every other.
fn contain_server_panics() {
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some(SERVER_THREAD) {
            eprintln!("contained on the server (the connection ends): {info}");
        } else {
            before(info);
        }
    }));
}

/// A startup message for protocol 3.0 naming `params`.
fn startup(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend(k.as_bytes());
        body.push(0);
        body.extend(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// A frontend message of type `tag`.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(((body.len() + 4) as i32).to_be_bytes());
    out.extend(body);
    out
}

fn cstr(s: &str) -> Vec<u8> {
    let mut b = s.as_bytes().to_vec();
    b.push(0);
    b
}

/// Byte 0's low bit clear: the rest follows a valid startup message (user `strata`); set: the
/// rest is all the client sends. See [`exchange`].
fn pg_messages(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut bytes = if mode & 1 == 0 { startup(&[("user", "strata"), ("database", "fuzz")]) } else { Vec::new() };
    bytes.extend(rest);
    exchange(&bytes);
}

/// Sends `bytes` to the process's fuzzed server as one client, closes the sending side and
/// returns everything the server answered until it closed. Panics if it neither answers nor
/// closes within a while.
pub fn exchange(bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(server()).expect("the fuzzed server accepts connections");
    let _ = s.set_read_timeout(Some(HANG));
    // The server may close before it read everything.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return answer,
            Ok(n) => answer.extend(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the server neither answered nor closed within {HANG:?}")
            }
            Err(_) => return answer,
        }
    }
}

/// A startup message for protocol 3.0 as user `strata`, then the frontend messages `(type,
/// body)` given, as a client sends them.
pub fn client_bytes(messages: &[(u8, &[u8])]) -> Vec<u8> {
    let mut out = startup(&[("user", "strata"), ("database", "fuzz")]);
    for (tag, body) in messages {
        out.extend(message(*tag, body));
    }
    out
}

fn seeds() -> Vec<Vec<u8>> {
    let query = |sql: &str| message(b'Q', &cstr(sql));
    let parse = |name: &str, sql: &str, types: &[i32]| {
        let mut b = cstr(name);
        b.extend(cstr(sql));
        b.extend((types.len() as i16).to_be_bytes());
        for t in types {
            b.extend(t.to_be_bytes());
        }
        message(b'P', &b)
    };
    let bind = |stmt: &str, formats: &[i16], params: &[Option<&[u8]>], results: &[i16]| {
        let mut b = cstr("");
        b.extend(cstr(stmt));
        b.extend((formats.len() as i16).to_be_bytes());
        for f in formats {
            b.extend(f.to_be_bytes());
        }
        b.extend((params.len() as i16).to_be_bytes());
        for p in params {
            match p {
                Some(v) => {
                    b.extend((v.len() as i32).to_be_bytes());
                    b.extend(*v);
                }
                None => b.extend((-1i32).to_be_bytes()),
            }
        }
        b.extend((results.len() as i16).to_be_bytes());
        for f in results {
            b.extend(f.to_be_bytes());
        }
        message(b'B', &b)
    };
    let describe = |kind: u8, name: &str| {
        let mut b = vec![kind];
        b.extend(cstr(name));
        message(b'D', &b)
    };
    let execute = message(b'E', &[0, 0, 0, 0, 0]);
    let sync = message(b'S', &[]);
    let terminate = message(b'X', &[]);
    let sessions: Vec<Vec<Vec<u8>>> = vec![
        vec![query("SELECT 1, 'a'::text, NULL"), terminate.clone()],
        vec![
            query("CREATE TABLE IF NOT EXISTS f (id BIGINT PRIMARY KEY, v TEXT, d DOUBLE PRECISION)"),
            query("INSERT INTO f VALUES (1, 'x', 1.5) ON CONFLICT DO NOTHING; SELECT * FROM f WHERE id = 1"),
            query("BEGIN; UPDATE f SET v = 'y' WHERE id = 1; SAVEPOINT s; ROLLBACK TO s; COMMIT"),
        ],
        vec![
            parse("s1", "SELECT $1::bigint + 1, $2::text", &[20, 25]),
            bind("s1", &[1, 0], &[Some(&7i64.to_be_bytes()), Some(b"t")], &[1]),
            describe(b'P', ""),
            execute.clone(),
            sync.clone(),
            message(b'C', &[b'S', b's', b'1', 0]),
            sync.clone(),
        ],
        vec![
            parse("", "SELECT $1", &[]),
            bind("", &[], &[None], &[]),
            describe(b'S', ""),
            execute.clone(),
            message(b'H', &[]),
            sync.clone(),
        ],
        vec![
            query("CREATE TABLE IF NOT EXISTS c (k INT PRIMARY KEY, s TEXT)"),
            query("COPY c FROM STDIN"),
            message(b'd', b"1\tone\n2\t\\N\n"),
            message(b'c', &[]),
            query("COPY c FROM STDIN WITH (FORMAT csv)"),
            message(b'f', &cstr("client gave up")),
            sync,
        ],
    ];
    let mut out: Vec<Vec<u8>> =
        sessions.into_iter().map(|msgs| std::iter::once(vec![0]).chain(msgs).collect::<Vec<_>>().concat()).collect();
    // Without the startup message: an SSL request, a cancel request, a startup with options,
    // a startup for an unsupported protocol.
    let mut ssl = vec![1u8];
    ssl.extend([0, 0, 0, 8, 0x04, 0xD2, 0x16, 0x2F]);
    out.push(ssl);
    let mut cancel = vec![1u8];
    cancel.extend([0, 0, 0, 16, 0x04, 0xD2, 0x16, 0x2E, 0, 0, 0, 1, 0, 0, 0, 2]);
    out.push(cancel);
    let mut opts = vec![1u8];
    opts.extend(startup(&[("user", "strata"), ("options", "-c search_path=public"), ("application_name", "fz")]));
    opts.extend(query("SHOW search_path"));
    out.push(opts);
    let mut old = vec![1u8];
    old.extend([0, 0, 0, 8, 0, 2, 0, 0]);
    out.push(old);
    out
}
