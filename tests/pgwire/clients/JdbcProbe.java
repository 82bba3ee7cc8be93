import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.Properties;

/** Drives shoal's PostgreSQL port with the JDBC driver; prints one "key=value" line per check. */
public class JdbcProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData meta = conn.getMetaData();
            System.out.println("product=" + meta.getDatabaseProductName() + " " + meta.getDatabaseProductVersion());
            StringBuilder tables = new StringBuilder();
            try (ResultSet rs = meta.getTables(null, null, "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    tables.append(rs.getString("TABLE_SCHEM")).append('.').append(rs.getString("TABLE_NAME")).append(',');
                }
            }
            System.out.println("tables=" + tables);
            StringBuilder columns = new StringBuilder();
            try (ResultSet rs = meta.getColumns(null, "public", "spans", "%")) {
                while (rs.next()) {
                    columns.append(rs.getString("COLUMN_NAME")).append(':').append(rs.getString("TYPE_NAME")).append(',');
                }
            }
            System.out.println("columns=" + columns);
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT count(*) AS n, min(timestamp) AS first FROM logs WHERE timestamp >= ? AND severity_number >= ?")) {
                ps.setObject(1, OffsetDateTime.of(2026, 1, 1, 0, 0, 0, 0, ZoneOffset.UTC));
                ps.setInt(2, 9);
                for (int run = 0; run < 6; run++) { // past prepareThreshold: a named server-side statement
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        System.out.println("count" + run + "=" + rs.getLong("n") + " first=" + rs.getObject("first", OffsetDateTime.class));
                    }
                }
            }
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.setFetchSize(7);
                int rows = 0;
                try (ResultSet rs = st.executeQuery("SELECT span_id, duration_ns FROM spans ORDER BY timestamp")) {
                    while (rs.next()) {
                        rows++;
                    }
                }
                System.out.println("fetched=" + rows);
            }
            conn.commit();
        }
    }
}
