// pgjdbc against a running strata server: java -cp postgresql.jar JdbcCheck.java HOST PORT PASSWORD
// Run by crates/strata-pg/tests/clients.rs; exits non-zero on the first failed check.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Arrays;
import java.util.Properties;

public class JdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    /** Two values of a column as getObject must return them: the Java class and the value. */
    static boolean same(Object got, Object want) {
        if (want == null) {
            return got == null;
        }
        if (got == null || got.getClass() != want.getClass()) {
            return false;
        }
        return want instanceof byte[] ? Arrays.equals((byte[]) got, (byte[]) want) : got.equals(want);
    }

    static String show(Object v) {
        if (v == null) {
            return "null";
        }
        return v.getClass().getSimpleName() + " " + (v instanceof byte[] ? Arrays.toString((byte[]) v) : v);
    }

    static long balance(Connection conn, int id) throws SQLException {
        try (PreparedStatement get = conn.prepareStatement("SELECT balance FROM accounts WHERE id = ?")) {
            get.setInt(1, id);
            try (ResultSet rs = get.executeQuery()) {
                check(rs.next(), "account " + id);
                return rs.getLong(1);
            }
        }
    }

    static void add(Connection conn, int id, long amount) throws SQLException {
        try (PreparedStatement up = conn.prepareStatement("UPDATE accounts SET balance = balance + ? WHERE id = ?")) {
            up.setLong(1, amount);
            up.setInt(2, id);
            check(up.executeUpdate() == 1, "update of account " + id);
        }
    }

    /**
     * Transactions with autocommit off: the driver sends BEGIN (as a prepared statement) before
     * the first statement and COMMIT/ROLLBACK only while the server reports a block in progress.
     */
    static void checkTransactions(Connection conn, String url, Properties props) throws SQLException {
        long a0 = balance(conn, 0), a1 = balance(conn, 1);
        conn.setAutoCommit(false);
        add(conn, 0, -7);
        add(conn, 1, 7);
        check(balance(conn, 0) == a0 - 7, "the block sees its own write");
        conn.commit();
        check(balance(conn, 0) == a0 - 7 && balance(conn, 1) == a1 + 7, "committed transfer");
        conn.commit();
        try (Statement st = conn.createStatement()) {
            st.executeUpdate("DELETE FROM accounts");
        }
        conn.rollback();
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM accounts")) {
            check(rs.next() && rs.getLong(1) == 15, "rollback kept the rows");
        }
        conn.commit();
        // A failed statement fails the block until ROLLBACK.
        add(conn, 0, 1000);
        try (Statement st = conn.createStatement()) {
            st.executeUpdate("INSERT INTO accounts VALUES (3, 'again', 0)");
            throw new AssertionError("duplicate key accepted");
        } catch (SQLException e) {
            check("23505".equals(e.getSQLState()), "duplicate key SQLSTATE " + e.getSQLState());
        }
        try {
            balance(conn, 0);
            throw new AssertionError("a statement in a failed block ran");
        } catch (SQLException e) {
            check("25P02".equals(e.getSQLState()), "failed block SQLSTATE " + e.getSQLState());
        }
        conn.rollback();
        check(balance(conn, 0) == a0 - 7, "the failed block's write was discarded");
        conn.commit();
        // A conflict under REPEATABLE READ: the second committer gets 40001; run again, it
        // commits. (Under READ COMMITTED, the default, the second writer would wait instead.)
        conn.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
        try (Connection other = DriverManager.getConnection(url, props)) {
            other.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
            other.setAutoCommit(false);
            add(conn, 2, 1);
            add(other, 2, 2);
            conn.commit();
            try {
                other.commit();
                throw new AssertionError("both conflicting commits were accepted");
            } catch (SQLException e) {
                check("40001".equals(e.getSQLState()), "conflict SQLSTATE " + e.getSQLState());
            }
            add(other, 2, 2);
            other.commit();
        }
        conn.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
        conn.setAutoCommit(true);
    }

    /**
     * Expressions whose result types DataFusion widens or changes, read with getObject. With
     * prepareThreshold=1 the driver prepares on the server and reads the types it knows (ints,
     * floats, dates, ...) in binary, so the announced type must match the bytes sent.
     */
    static void checkTypes(Connection conn) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TABLE eb (id INT PRIMARY KEY, n INT, s SMALLINT, f DOUBLE, t TEXT, by BYTEA, d DATE, ok BOOLEAN)");
            st.execute("INSERT INTO eb VALUES (1, 100000, 7, 2.5, 'h\u00e9llo', X'00ff', DATE '2026-11-26', true),"
                    + " (2, -5, 8, CAST('NaN' AS DOUBLE), '', X'', DATE '1970-01-01', false)");
        }
        Object[][] cases = {
            {"CASE WHEN id = 1 THEN n ELSE 1000 END", 100000L, 1000L},
            {"COALESCE(s, n)", 7, 8},
            {"NULLIF(n, -5)", 100000L, null},
            {"n + s", 100007, 3},
            {"s * 2", 14L, 16L},
            {"s", 7, 8},
            {"CAST(n AS DOUBLE) / 4", 25000.0, -1.25},
            {"CAST(n AS REAL)", 100000.0f, -5.0f},
            {"f", 2.5, Double.NaN},
            {"CASE WHEN ok THEN f ELSE CAST('-Infinity' AS DOUBLE) END", 2.5, Double.NEGATIVE_INFINITY},
            {"t", "h\u00e9llo", ""},
            {"by", new byte[] {0, (byte) 0xff}, new byte[] {}},
            {"d", java.sql.Date.valueOf("2026-11-26"), java.sql.Date.valueOf("1970-01-01")},
            {"ok", true, false},
            {"CAST(n AS DECIMAL(12, 2))", new BigDecimal("100000.00"), new BigDecimal("-5.00")},
            {"n + CAST(id AS BIGINT)", 100001L, -3L},
        };
        for (Object[] c : cases) {
            String sql = "SELECT " + c[0] + " FROM eb ORDER BY id";
            // Three runs: the first ones may still be unnamed or text, later ones are binary.
            for (int run = 0; run < 3; run++) {
                try (PreparedStatement q = conn.prepareStatement(sql);
                        ResultSet rs = q.executeQuery()) {
                    for (int row = 1; row <= 2; row++) {
                        check(rs.next(), sql + ": row " + row);
                        Object got = rs.getObject(1);
                        check(same(got, c[row]), sql + " run " + run + " row " + row + ": got " + show(got) + ", want " + show(c[row]));
                    }
                    check(!rs.next(), sql + ": two rows");
                }
            }
        }
        Object[][] aggregates = {
            {"sum(n)", 99995L}, {"avg(s)", 7.5}, {"min(s)", 7}, {"max(n)", 100000}, {"count(*)", 2L},
            {"min(d)", java.sql.Date.valueOf("1970-01-01")},
        };
        for (Object[] a : aggregates) {
            for (int run = 0; run < 3; run++) {
                try (PreparedStatement q = conn.prepareStatement("SELECT " + a[0] + " FROM eb"); ResultSet rs = q.executeQuery()) {
                    check(rs.next(), a[0] + ": a row");
                    Object got = rs.getObject(1);
                    check(same(got, a[1]), a[0] + " run " + run + ": got " + show(got) + ", want " + show(a[1]));
                }
            }
        }
        try (PreparedStatement q = conn.prepareStatement("SELECT n FROM eb WHERE s = ?")) {
            q.setShort(1, (short) 8);
            try (ResultSet rs = q.executeQuery()) {
                check(rs.next() && rs.getInt(1) == -5 && !rs.next(), "smallint parameter");
            }
        }
    }

    /** DatabaseMetaData, which tools such as DBeaver browse a database by: pgjdbc reads it from pg_catalog. */
    static void checkMetadata(Connection conn) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TABLE meta (a INT, b VARCHAR(12) NOT NULL, c DOUBLE PRECISION, PRIMARY KEY (a, b))");
            st.execute("CREATE INDEX meta_c ON meta (c)");
            st.execute("CREATE VIEW meta_view AS SELECT a, c FROM meta");
        }
        java.sql.DatabaseMetaData md = conn.getMetaData();
        java.util.List<String> tables = new java.util.ArrayList<>();
        try (ResultSet rs = md.getTables(null, "public", "meta%", new String[] {"TABLE", "VIEW"})) {
            while (rs.next()) tables.add(rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
        }
        check(tables.equals(java.util.List.of("meta:TABLE", "meta_view:VIEW")), "getTables " + tables);
        java.util.List<String> columns = new java.util.ArrayList<>();
        try (ResultSet rs = md.getColumns(null, "public", "meta", "%")) {
            while (rs.next()) {
                columns.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME") + ":" + rs.getInt("COLUMN_SIZE")
                        + ":" + rs.getString("IS_NULLABLE"));
            }
        }
        check(columns.equals(java.util.List.of("a:int4:10:NO", "b:varchar:12:NO", "c:float8:17:YES")), "getColumns " + columns);
        java.util.List<String> key = new java.util.ArrayList<>();
        try (ResultSet rs = md.getPrimaryKeys(null, "public", "meta")) {
            while (rs.next()) key.add(rs.getString("COLUMN_NAME") + ":" + rs.getInt("KEY_SEQ") + ":" + rs.getString("PK_NAME"));
        }
        check(key.equals(java.util.List.of("a:1:meta_pkey", "b:2:meta_pkey")), "getPrimaryKeys " + key);
        java.util.List<String> indexes = new java.util.ArrayList<>();
        try (ResultSet rs = md.getIndexInfo(null, "public", "meta", false, false)) {
            while (rs.next()) {
                indexes.add(rs.getString("INDEX_NAME") + ":" + rs.getString("COLUMN_NAME") + ":" + rs.getBoolean("NON_UNIQUE"));
            }
        }
        java.util.Collections.sort(indexes);
        check(indexes.equals(java.util.List.of("meta_c:c:true", "meta_pkey:a:false", "meta_pkey:b:false")), "getIndexInfo " + indexes);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/app";
        Properties props = new Properties();
        props.setProperty("user", "strata");
        props.setProperty("password", args[2]);
        props.setProperty("connectTimeout", "10");
        // Use named server-side statements from the first execution on.
        props.setProperty("prepareThreshold", "1");
        // Read the types the driver knows (ints, floats, dates, ...) in binary format.
        props.setProperty("binaryTransfer", "true");
        try (Connection conn = DriverManager.getConnection(url, props)) {
            check(conn.getAutoCommit(), "autocommit is the default");
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE accounts (id INT PRIMARY KEY, owner TEXT NOT NULL, balance BIGINT)");
            }
            try (PreparedStatement ins = conn.prepareStatement("INSERT INTO accounts VALUES (?, ?, ?)")) {
                for (int i = 0; i < 20; i++) {
                    ins.setInt(1, i);
                    ins.setString(2, "owner" + (i % 4));
                    ins.setLong(3, 1000L * i);
                    check(ins.executeUpdate() == 1, "one row inserted");
                }
            }
            try (PreparedStatement up = conn.prepareStatement("UPDATE accounts SET balance = balance + ? WHERE owner = ?")) {
                up.setLong(1, 5);
                up.setString(2, "owner1");
                check(up.executeUpdate() == 5, "five rows updated");
            }
            try (Statement st = conn.createStatement()) {
                check(st.executeUpdate("DELETE FROM accounts WHERE id >= 15") == 5, "five rows deleted");
            }
            try (PreparedStatement q = conn.prepareStatement(
                    "SELECT owner, count(*) AS n, sum(balance) AS total FROM accounts WHERE id < ? GROUP BY owner ORDER BY owner")) {
                q.setInt(1, 15);
                try (ResultSet rs = q.executeQuery()) {
                    long[] totals = new long[4];
                    int groups = 0;
                    while (rs.next()) {
                        check(rs.getString("owner").equals("owner" + groups), "group order");
                        totals[groups] = rs.getLong("total");
                        groups++;
                    }
                    check(groups == 4, "four groups, got " + groups);
                    // ids 1, 5, 9, 13 belong to owner1, each with 5 added.
                    check(totals[1] == 1000L * (1 + 5 + 9 + 13) + 20, "owner1 total " + totals[1]);
                }
            }
            try (PreparedStatement get = conn.prepareStatement("SELECT owner, balance FROM accounts WHERE id = ?")) {
                for (int i = 0; i < 3; i++) {
                    get.setInt(1, i);
                    try (ResultSet rs = get.executeQuery()) {
                        check(rs.next() && rs.getString(1).equals("owner" + i), "point read " + i);
                        check(!rs.next(), "one row");
                    }
                }
            }
            try (Statement st = conn.createStatement()) {
                st.executeUpdate("INSERT INTO accounts VALUES (3, 'again', 0)");
                throw new AssertionError("duplicate key accepted");
            } catch (SQLException e) {
                check("23505".equals(e.getSQLState()), "duplicate key SQLSTATE " + e.getSQLState());
            }
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM accounts")) {
                check(rs.next() && rs.getLong(1) == 15, "fifteen rows remain");
            }
            checkTransactions(conn, url, props);
            checkTypes(conn);
            checkMetadata(conn);
        }
        props.setProperty("password", args[2] + "x");
        try (Connection conn = DriverManager.getConnection(url, props)) {
            throw new AssertionError("a wrong password was accepted");
        } catch (SQLException e) {
            check("28P01".equals(e.getSQLState()), "wrong password SQLSTATE " + e.getSQLState() + ": " + e.getMessage());
        }
        System.out.println("pgjdbc checks passed");
    }
}
