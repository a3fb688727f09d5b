//! The server's fuzz target (`strata_pg::fuzz`: a client's bytes) replayed on stable, as
//! `strata`'s own are (`crates/strata/tests/it/fuzz.rs`).

#[test]
fn pg_messages() {
    strata::fuzz::replay_test(&strata_pg::fuzz::targets(), "pg_messages", env!("CARGO_MANIFEST_DIR"));
}

/// Found by the `pg_messages` fuzz target: an Execute asking for two billion rows (or a negative
/// number, which PostgreSQL reads as no limit) made the server set aside room for that many rows
/// and abort. Now the row comes back, and the server serves the next client.
#[test]
fn an_execute_asking_for_billions_of_rows_answers_and_the_server_stays_up() {
    for max_rows in [i32::MAX, -1, i32::MIN, 1 << 20] {
        let mut execute = vec![0u8];
        execute.extend(max_rows.to_be_bytes());
        let bytes = strata_pg::fuzz::client_bytes(&[
            (b'P', b"\0SELECT 41 + 1\0\0\0"),
            (b'B', b"\0\0\0\0\0\0\0\0"),
            (b'E', &execute),
            (b'S', b""),
            (b'X', b""),
        ]);
        let answer = strata_pg::fuzz::exchange(&bytes);
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("42") && text.contains("SELECT 1"), "max_rows {max_rows}: {text:?}");
    }
}

/// Found by the `pg_messages` target: pgwire's decoder panics on a Parse message whose parameter
/// types run past its end. The panic ends that connection only; the server answers the next
/// client.
#[test]
fn a_message_pgwire_panics_on_ends_its_connection_and_the_server_stays_up() {
    let n = strata::fuzz::regressions(
        &strata_pg::fuzz::targets(),
        "pg_messages",
        Some("parse-with-types-past-its-end"),
        env!("CARGO_MANIFEST_DIR"),
    );
    assert_eq!(n, 1);
    let answer = strata_pg::fuzz::exchange(&strata_pg::fuzz::client_bytes(&[(b'Q', b"SELECT 6 * 7\0"), (b'X', b"")]));
    assert!(String::from_utf8_lossy(&answer).contains("42"), "{answer:?}");
}
