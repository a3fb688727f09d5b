//! The transaction status ReadyForQuery reports (`I`, `T`, `E`) after each step of transaction
//! blocks, in the simple and the extended protocol, read off the wire by a minimal client:
//! drivers (psycopg, pgJDBC) decide by it whether to send COMMIT at all, so it must be what
//! PostgreSQL would report, also after a failed COMMIT (idle) and after a statement that failed
//! in Parse (a failed block).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use super::start;

/// What the server answered one request with.
#[derive(Debug, Default)]
struct Answer {
    /// Command tags (CommandComplete), in order.
    tags: Vec<String>,
    /// SQLSTATEs of error responses.
    errors: Vec<String>,
    /// Data rows received.
    rows: usize,
    /// The status byte of the closing ReadyForQuery.
    status: char,
}

struct Wire {
    stream: TcpStream,
    extended: bool,
}

fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

impl Wire {
    fn connect(addr: SocketAddr, extended: bool) -> Wire {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let mut body = 196608i32.to_be_bytes().to_vec();
        for s in ["user", "strata", "database", "strata", ""] {
            body.extend(cstr(s));
        }
        let mut startup = (body.len() as i32 + 4).to_be_bytes().to_vec();
        startup.extend(body);
        stream.write_all(&startup).unwrap();
        let mut wire = Wire { stream, extended };
        let ready = wire.answer();
        assert_eq!(ready.status, 'I', "{ready:?}");
        wire
    }

    /// Reads messages up to ReadyForQuery.
    fn answer(&mut self) -> Answer {
        let mut a = Answer::default();
        loop {
            let mut head = [0u8; 5];
            self.stream.read_exact(&mut head).unwrap();
            let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize - 4;
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).unwrap();
            match head[0] {
                b'C' => a.tags.push(String::from_utf8_lossy(&body[..body.len() - 1]).into_owned()),
                b'D' => a.rows += 1,
                b'E' => {
                    // Fields: a type byte and a C string each; 'C' is the SQLSTATE.
                    let mut rest = &body[..];
                    while let Some((&t, tail)) = rest.split_first() {
                        if t == 0 {
                            break;
                        }
                        let end = tail.iter().position(|&b| b == 0).unwrap();
                        if t == b'C' {
                            a.errors.push(String::from_utf8_lossy(&tail[..end]).into_owned());
                        }
                        rest = &tail[end + 1..];
                    }
                }
                b'Z' => {
                    a.status = body[0] as char;
                    return a;
                }
                _ => {}
            }
        }
    }

    /// Sends one statement (a simple Query, or Parse/Bind/Describe/Execute/Sync) and reads the
    /// answer.
    fn run(&mut self, sql: &str) -> Answer {
        let mut out = Vec::new();
        if self.extended {
            let mut parse = cstr("");
            parse.extend(cstr(sql));
            parse.extend(0i16.to_be_bytes());
            out.extend(message(b'P', &parse));
            let mut bind = cstr("");
            bind.extend(cstr(""));
            bind.extend([0, 0, 0, 0, 0, 0]);
            out.extend(message(b'B', &bind));
            out.extend(message(b'D', &[b'P', 0]));
            let mut execute = cstr("");
            execute.extend(0i32.to_be_bytes());
            out.extend(message(b'E', &execute));
            out.extend(message(b'S', &[]));
        } else {
            out.extend(message(b'Q', &cstr(sql)));
        }
        self.stream.write_all(&out).unwrap();
        self.answer()
    }
}

/// Runs `sql` and checks the tag (or error) and the status it ends in.
fn step(w: &mut Wire, sql: &str, expect: &str, status: char) -> Answer {
    let a = w.run(sql);
    let got = a.errors.first().cloned().or_else(|| a.tags.last().cloned()).unwrap_or_default();
    let protocol = if w.extended { "extended" } else { "simple" };
    assert!(got.starts_with(expect), "{protocol}: `{sql}` answered {a:?}, expected {expect}");
    assert_eq!(a.status, status, "{protocol}: `{sql}` left status {} ({a:?}), expected {status}", a.status);
    a
}

#[test]
fn ready_for_query_reports_idle_in_block_and_failed_as_postgresql_does() {
    let server = start(|_| {});
    let mut setup = Wire::connect(server.addr, false);
    step(&mut setup, "CREATE TABLE t (id INT PRIMARY KEY, n INT)", "CREATE TABLE", 'I');
    step(&mut setup, "INSERT INTO t VALUES (1, 0), (2, 0)", "INSERT 0 2", 'I');
    for extended in [false, true] {
        let mut w = Wire::connect(server.addr, extended);
        let mut other = Wire::connect(server.addr, extended);
        step(&mut w, "SELECT 1", "SELECT 1", 'I');
        step(&mut w, "BEGIN", "BEGIN", 'T');
        step(&mut w, "SELECT n FROM t WHERE id = 1", "SELECT 1", 'T');
        step(&mut w, "UPDATE t SET n = n + 1 WHERE id = 1", "UPDATE 1", 'T');
        step(&mut w, "COMMIT", "COMMIT", 'I');
        // A failed statement fails the block; COMMIT then rolls back and ends it.
        step(&mut w, "START TRANSACTION", "START TRANSACTION", 'T');
        step(&mut w, "UPDATE t SET n = 100 WHERE id = 1", "UPDATE 1", 'T');
        step(&mut w, "SELECT * FROM missing", "42P01", 'E');
        step(&mut w, "SELECT 1", "25P02", 'E');
        step(&mut w, "COMMIT", "ROLLBACK", 'I');
        // A statement that does not even parse fails the block too (in the extended protocol
        // it fails in Parse, before the session sees it).
        step(&mut w, "BEGIN", "BEGIN", 'T');
        step(&mut w, "SELEC 1", "42601", 'E');
        step(&mut w, "SELECT 1", "25P02", 'E');
        step(&mut w, "ABORT", "ROLLBACK", 'I');
        // A COMMIT that loses a conflict ends the block: idle, not failed.
        // (Under REPEATABLE READ: under READ COMMITTED `other` would wait for `w`'s row.)
        step(&mut w, "BEGIN ISOLATION LEVEL REPEATABLE READ", "BEGIN", 'T');
        step(&mut w, "UPDATE t SET n = n + 10 WHERE id = 2", "UPDATE 1", 'T');
        step(&mut other, "UPDATE t SET n = n + 1 WHERE id = 2", "UPDATE 1", 'I');
        step(&mut w, "COMMIT", "40001", 'I');
        step(&mut w, "SELECT 1", "SELECT 1", 'I');
        // DDL in a block: 25001, and the block fails.
        step(&mut w, "BEGIN", "BEGIN", 'T');
        step(&mut w, "CREATE TABLE u (id INT PRIMARY KEY)", "25001", 'E');
        step(&mut w, "ROLLBACK", "ROLLBACK", 'I');
        // Errors outside a block leave the session idle.
        step(&mut w, "INSERT INTO t VALUES (1, 0)", "23505", 'I');
        // Two statements in one simple query, the first opening a block.
        if !extended {
            let a = step(&mut w, "BEGIN; SELECT n FROM t", "SELECT 2", 'T');
            assert_eq!(a.tags, ["BEGIN", "SELECT 2"]);
            step(&mut w, "ROLLBACK", "ROLLBACK", 'I');
        }
    }
    // Both protocols' committed increments, and neither the failed nor the lost block's writes.
    let a = step(&mut setup, "SELECT id FROM t WHERE id = 1 AND n = 2", "SELECT 1", 'I');
    assert_eq!(a.rows, 1);
    let a = step(&mut setup, "SELECT id FROM t WHERE id = 2 AND n = 2", "SELECT 1", 'I');
    assert_eq!(a.rows, 1);
}

#[test]
fn a_dropped_connection_rolls_its_block_back() {
    let server = start(|_| {});
    let mut setup = Wire::connect(server.addr, false);
    step(&mut setup, "CREATE TABLE t (id INT PRIMARY KEY, n INT)", "CREATE TABLE", 'I');
    {
        let mut w = Wire::connect(server.addr, true);
        step(&mut w, "BEGIN", "BEGIN", 'T');
        step(&mut w, "INSERT INTO t VALUES (1, 1)", "INSERT 0 1", 'T');
    }
    // The server notices the closed socket and drops the session; the row never appears, and
    // the key can be taken.
    std::thread::sleep(std::time::Duration::from_millis(200));
    step(&mut setup, "INSERT INTO t VALUES (1, 2)", "INSERT 0 1", 'I');
    let a = step(&mut setup, "SELECT id FROM t WHERE n = 2", "SELECT 1", 'I');
    assert_eq!(a.rows, 1);
}
