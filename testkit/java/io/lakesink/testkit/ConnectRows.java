package io.lakesink.testkit;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Date;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Timestamp;

/**
 * Rows of a given shape as Kafka's own JsonConverter writes them (schemas.enable=true, decimal.format=BASE64), plain
 * or in a Debezium PostgreSQL change event (op c, as ConnectRecords builds one): the reference the benchmark's Connect
 * JSON writer (testkit/connect_writer.py) is checked against.
 *
 * <p>Usage: {@code ConnectRows plain|debezium|changes}. The first line of standard input is the shape, a JSON array
 * of {@code [name, kind]} with the kinds of bench/registry_rows.py (long, int, string, boolean, double, decimal as a
 * string of 2 decimal places, timestamp in milliseconds, strings); then one JSON object per row and line. Prints one
 * line per row: the converter's bytes in base64. {@code changes}: each line is a change event {@code {"op": "c"|"u"|"d",
 * "before": row or null, "after": row or null}} (its source position the line's number), a field a row lacks or has
 * null written null: the row's fields are optional, as a PostgreSQL table's nullable columns are, so that a delete's
 * before can hold its key alone (REPLICA IDENTITY DEFAULT).
 */
public final class ConnectRows {

    static Schema kind(String kind) {
        return switch (kind) {
            case "long" -> Schema.INT64_SCHEMA;
            case "int" -> Schema.INT32_SCHEMA;
            case "string" -> Schema.STRING_SCHEMA;
            case "boolean" -> Schema.BOOLEAN_SCHEMA;
            case "double" -> Schema.FLOAT64_SCHEMA;
            case "decimal" -> Decimal.schema(2);
            case "timestamp" -> Timestamp.SCHEMA;
            case "strings" -> SchemaBuilder.array(Schema.STRING_SCHEMA).build();
            default -> throw new IllegalArgumentException("no kind " + kind);
        };
    }

    static Object value(String kind, JsonNode node) {
        return switch (kind) {
            case "long" -> node.longValue();
            case "int" -> node.intValue();
            case "string" -> node.textValue();
            case "boolean" -> node.booleanValue();
            case "double" -> node.doubleValue();
            case "decimal" -> new BigDecimal(node.textValue());
            case "timestamp" -> new Date(node.longValue());
            case "strings" -> {
                List<String> items = new ArrayList<>();
                node.forEach(item -> items.add(item.textValue()));
                yield items;
            }
            default -> throw new IllegalArgumentException("no kind " + kind);
        };
    }

    static Struct struct(Schema row, JsonNode shape, JsonNode node) {
        Struct value = new Struct(row);
        shape.forEach(field -> {
            JsonNode cell = node.get(field.get(0).textValue());
            value.put(field.get(0).textValue(),
                    cell == null || cell.isNull() ? null : value(field.get(1).textValue(), cell));
        });
        return value;
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length == 1 ? args[0] : "";
        boolean changes = mode.equals("changes");
        boolean debezium = changes || mode.equals("debezium");
        if (!(debezium || mode.equals("plain"))) {
            throw new IllegalArgumentException("usage: ConnectRows plain|debezium|changes");
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        JsonNode shape = ConnectRecords.MAPPER.readTree(in.readLine());
        SchemaBuilder builder = SchemaBuilder.struct().name("bench.BenchEvent");
        if (debezium) {
            builder.optional();
        }
        shape.forEach(field -> {
            Schema kind = kind(field.get(1).textValue());
            builder.field(field.get(0).textValue(), changes ? optional(kind) : kind);
        });
        Schema row = builder.build();
        Schema envelope = debezium ? ConnectRecords.envelope(row) : null;
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        long lsn = 0;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            JsonNode node = ConnectRecords.MAPPER.readTree(line);
            Object written;
            Schema schema = debezium ? envelope : row;
            if (changes) {
                JsonNode before = node.get("before");
                JsonNode after = node.get("after");
                written = ConnectRecords.change(envelope, node.get("op").textValue(), ++lsn,
                        before.isNull() ? null : struct(row, shape, before),
                        after.isNull() ? null : struct(row, shape, after));
            } else if (debezium) {
                written = ConnectRecords.change(envelope, "c", ++lsn, null, struct(row, shape, node));
            } else {
                written = struct(row, shape, node);
            }
            byte[] bytes = ConnectRecords.WRAPPED.fromConnectData(ConnectRecords.TOPIC, schema, written);
            out.println(Base64.getEncoder().encodeToString(bytes));
        }
        out.flush();
    }

    static Schema optional(Schema kind) {
        SchemaBuilder builder = kind.type() == Schema.Type.ARRAY ? SchemaBuilder.array(kind.valueSchema())
                : new SchemaBuilder(kind.type());
        if (kind.name() != null) {
            builder.name(kind.name());
        }
        if (kind.version() != null) {
            builder.version(kind.version());
        }
        if (kind.parameters() != null) {
            builder.parameters(kind.parameters());
        }
        return builder.optional().build();
    }
}
