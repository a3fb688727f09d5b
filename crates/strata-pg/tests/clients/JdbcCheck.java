// pgjdbc against a running strata server: java -cp postgresql.jar JdbcCheck.java HOST PORT PASSWORD
// Run by crates/strata-pg/tests/clients.rs; exits non-zero on the first failed check.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class JdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/app";
        Properties props = new Properties();
        props.setProperty("user", "strata");
        props.setProperty("password", args[2]);
        props.setProperty("connectTimeout", "10");
        // Use named server-side statements from the first execution on.
        props.setProperty("prepareThreshold", "1");
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
