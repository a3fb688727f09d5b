//! `strata sql`: SQL statements against the database, from `-c`, from a script on stdin, or in
//! an interactive shell with history and multi-line statements.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use strata::Db;
use strata_sql::datafusion::arrow::record_batch::RecordBatch;
use strata_sql::datafusion::arrow::util::pretty::pretty_format_batches;
use strata_sql::{Output, SqlEngine, SqlError, TxnStatus};

use crate::exec::{sql_error as cli_error, CliError};
use crate::Format;

fn print_error(e: &SqlError) {
    eprintln!("ERROR: {} (SQLSTATE {})", e.message, e.kind.sqlstate());
}

/// The command tag of a command as psql prints it.
fn tag_text(tag: &str, rows: u64) -> String {
    match tag {
        "INSERT" => format!("INSERT 0 {rows}"),
        "UPDATE" | "DELETE" => format!("{tag} {rows}"),
        _ => tag.to_string(),
    }
}

/// Prints one statement's output. Row data goes to stdout; in CSV and JSON formats a command's
/// tag goes to stderr, so stdout holds rows only.
fn print_output(out: &Output, format: Format) -> Result<(), CliError> {
    let io = |e: std::io::Error| CliError::new("io_error", e.to_string());
    let arrow = |e: strata_sql::datafusion::arrow::error::ArrowError| CliError::new("io_error", e.to_string());
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    match out {
        Output::Command { tag, rows } => match format {
            Format::Table => writeln!(w, "{}", tag_text(tag, *rows)).map_err(io)?,
            _ => eprintln!("{}", tag_text(tag, *rows)),
        },
        Output::Rows { schema, batches } => match format {
            Format::Table => {
                let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
                if batches.is_empty() {
                    let empty = RecordBatch::new_empty(schema.clone());
                    writeln!(w, "{}", pretty_format_batches(&[empty]).map_err(arrow)?).map_err(io)?;
                } else {
                    writeln!(w, "{}", pretty_format_batches(batches).map_err(arrow)?).map_err(io)?;
                }
                writeln!(w, "({n} row{})", if n == 1 { "" } else { "s" }).map_err(io)?;
            }
            Format::Csv => {
                let mut writer =
                    strata_sql::datafusion::arrow::csv::WriterBuilder::new().with_header(true).build(&mut w);
                if batches.is_empty() {
                    writer.write(&RecordBatch::new_empty(schema.clone())).map_err(arrow)?;
                }
                for b in batches {
                    writer.write(b).map_err(arrow)?;
                }
            }
            Format::Json => {
                use strata_sql::datafusion::arrow::json::{writer::LineDelimited, WriterBuilder};
                let mut writer = WriterBuilder::new().with_explicit_nulls(true).build::<_, LineDelimited>(&mut w);
                for b in batches {
                    writer.write(b).map_err(arrow)?;
                }
                writer.finish().map_err(arrow)?;
            }
        },
    }
    w.flush().map_err(io)
}

/// Runs `sql` statement by statement in one session, printing each output; stops at the first
/// error (a block still open then, or at the end, is rolled back).
fn run_script(rt: &tokio::runtime::Runtime, engine: &SqlEngine, sql: &str, format: Format) -> Result<(), CliError> {
    let statements = engine.parse(sql).map_err(cli_error)?;
    let session = engine.session();
    for stmt in &statements {
        let out = rt.block_on(session.run(stmt)).map_err(cli_error)?;
        print_output(&out, format)?;
    }
    Ok(())
}

/// `strata sql [-c QUERY] [--format F]`.
pub fn run(db: Db, command: Option<String>, format: Format) -> Result<(), CliError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("io_error", format!("cannot start the query runtime: {e}")))?;
    let engine = SqlEngine::new(Arc::new(db)).map_err(cli_error)?;
    let result = match command {
        Some(sql) => run_script(&rt, &engine, &sql, format),
        None if !std::io::stdin().is_terminal() => {
            let mut sql = String::new();
            std::io::stdin()
                .read_to_string(&mut sql)
                .map_err(|e| CliError::new("io_error", format!("reading SQL from stdin: {e}")))?;
            run_script(&rt, &engine, &sql, format)
        }
        None => shell(&rt, &engine, format),
    };
    // Close the database cleanly (flushes nothing extra; waits for background work).
    drop(engine);
    result
}

/// The password in `path`: its first line, which must not be empty.
pub fn read_password(path: &std::path::Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::new("io_error", format!("reading the password file {}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if line.is_empty() {
        return Err(CliError::new("bad_request", format!("the password file {} is empty", path.display())));
    }
    Ok(line.to_string())
}

/// `strata serve --pg ADDR`: serves until Ctrl-C, then closes the database.
pub fn serve(db: Db, config: strata_pg::Config) -> Result<(), CliError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("io_error", format!("cannot start the server runtime: {e}")))?;
    let db = Arc::new(db);
    let engine = SqlEngine::new(db.clone()).map_err(cli_error)?;
    let auth = match (&config.password, config.auth) {
        (None, _) => "no password".to_string(),
        (Some(_), strata_pg::AuthMethod::Scram) => format!("user {}, SCRAM-SHA-256", config.user),
        (Some(_), strata_pg::AuthMethod::Md5) => format!("user {}, MD5", config.user),
    };
    rt.block_on(async move {
        let server = strata_pg::Server::bind(engine, config)
            .await
            .map_err(|e| CliError::new("io_error", format!("cannot listen: {e}")))?;
        let addr = server.local_addr().map_err(|e| CliError::new("io_error", e.to_string()))?;
        eprintln!("strata: serving PostgreSQL protocol on {addr} ({auth}); Ctrl-C stops");
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        server.run(shutdown).await.map_err(|e| CliError::new("io_error", e.to_string()))
    })?;
    eprintln!("strata: stopped");
    drop(rt);
    match Arc::try_unwrap(db) {
        Ok(db) => db.close().map_err(CliError::from),
        Err(_) => Ok(()),
    }
}

/// Whether `buf` holds a complete statement: it ends with `;` outside quotes and comments.
fn complete(buf: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut last = None;
    let mut chars = buf.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                last = Some(c);
            }
            Some(_) => {}
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                last = Some(c);
            }
            None if c == '-' && chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            None if !c.is_whitespace() => last = Some(c),
            None => {}
        }
    }
    quote.is_none() && last == Some(';')
}

fn history_path() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".strata_sql_history"))
}

fn describe(rt: &tokio::runtime::Runtime, engine: &SqlEngine, arg: &str, format: Format) {
    let sql = if arg.is_empty() {
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name".to_string()
    } else {
        format!(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = '{}' ORDER BY ordinal_position",
            arg.replace('\'', "''")
        )
    };
    match rt.block_on(engine.execute(&sql)) {
        Ok(outs) => {
            for o in &outs {
                if let Err(e) = print_output(o, format) {
                    eprintln!("{e}");
                }
            }
        }
        Err(e) => print_error(&e),
    }
}

const HELP: &str = "Statements end with ';' and may span lines. BEGIN opens a transaction block
(the prompt shows strata*> in one, strata!> in a failed one), COMMIT or ROLLBACK ends it.
  \\d          list tables
  \\d TABLE    describe a table
  \\timing     toggle timing of statements (on by default)
  \\q          quit (or Ctrl-D); Ctrl-C clears the statement being typed";

fn shell(rt: &tokio::runtime::Runtime, engine: &SqlEngine, format: Format) -> Result<(), CliError> {
    use rustyline::error::ReadlineError;
    let mut editor = rustyline::DefaultEditor::new()
        .map_err(|e| CliError::new("io_error", format!("cannot start the shell: {e}")))?;
    let history = history_path();
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    println!("strata sql: statements end with ';', \\? for help, \\q to quit");
    let mut buf = String::new();
    let mut timing = true;
    let session = engine.session();
    loop {
        let prompt = match (buf.is_empty(), session.status()) {
            (false, _) => "   ...> ",
            (true, TxnStatus::Idle) => "strata> ",
            (true, TxnStatus::InBlock) => "strata*> ",
            (true, TxnStatus::Failed) => "strata!> ",
        };
        let line = match editor.readline(prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => {
                buf.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(CliError::new("io_error", format!("reading input: {e}"))),
        };
        let trimmed = line.trim();
        if buf.is_empty() && trimmed.starts_with('\\') {
            let _ = editor.add_history_entry(trimmed);
            let (cmd, arg) = trimmed.split_once(char::is_whitespace).unwrap_or((trimmed, ""));
            match cmd {
                "\\q" => break,
                "\\d" => describe(rt, engine, arg.trim(), format),
                "\\timing" => {
                    timing = !timing;
                    println!("timing {}", if timing { "on" } else { "off" });
                }
                "\\?" | "\\h" => println!("{HELP}"),
                other => eprintln!("unknown command {other}; \\? lists them"),
            }
            continue;
        }
        if trimmed.is_empty() && buf.is_empty() {
            continue;
        }
        buf.push_str(&line);
        buf.push('\n');
        if !complete(&buf) {
            continue;
        }
        let sql = std::mem::take(&mut buf);
        let _ = editor.add_history_entry(sql.trim());
        match engine.parse(&sql) {
            Err(e) => {
                // As in PostgreSQL, a statement that does not parse fails the open block.
                session.fail_block();
                print_error(&e)
            }
            Ok(statements) => {
                for stmt in &statements {
                    let start = Instant::now();
                    match rt.block_on(session.run(stmt)) {
                        Ok(out) => {
                            if let Err(e) = print_output(&out, format) {
                                eprintln!("{e}");
                            }
                            if timing {
                                println!("Time: {:.3} ms", start.elapsed().as_secs_f64() * 1e3);
                            }
                        }
                        Err(e) => {
                            print_error(&e);
                            break;
                        }
                    }
                }
            }
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::complete;

    #[test]
    fn a_statement_is_complete_at_a_semicolon_outside_quotes_and_comments() {
        assert!(complete("select 1;"));
        assert!(complete("select 1;  \n"));
        assert!(complete("select\n 1\n;"));
        assert!(!complete("select 1"));
        assert!(!complete("select ';"));
        assert!(complete("select ';';"));
        assert!(!complete("select ';'"));
        assert!(!complete("select 1 -- done;"));
        assert!(complete("select 1; -- done\n"));
        assert!(!complete("select \"a;"));
    }
}
