package io.lakesink.testkit;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.OffsetTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;

/**
 * Kafka Connect records as Kafka's own JsonConverter writes them, each with an oracle of what its values mean: the
 * reference input of lakesink's Connect-JSON tests (testkit/connect_records.py builds and runs this class).
 *
 * <p>Schemas are built with Connect's SchemaBuilder, Debezium's semantic types with the names, types, versions and
 * parameters Debezium gives them; values start from what a database holds (java.time values, BigDecimal, bytes) and
 * are turned into Connect's values as Connect and Debezium turn them. Each value's meaning is stated from that
 * starting value, never from the converter's output.
 *
 * <p>Usage: {@code ConnectRecords append|debezium}. Prints one JSON object per record and line:
 * {@code set} (which schema), {@code id}, {@code key} / {@code value} (the converter's bytes, base64; null for none),
 * {@code plain} (the value with schemas.enable=false), {@code numeric} (with decimal.format=NUMERIC), {@code expect}
 * (field -> meaning of the row; null for none), {@code bad} (the field a record error must name), and for
 * Debezium events {@code op} and {@code lsn}.
 *
 * <p>A meaning is null or a JSON array whose first item names it: ["int", n], ["float32", raw int bits],
 * ["float64", raw long bits], ["boolean", b], ["string", s], ["bytes", base64], ["decimal", "unscaled", scale],
 * ["date", epoch day], ["time", nanoseconds of the day], ["instant", epoch second, nano of second],
 * ["local", second since 1970-01-01T00:00, nano of second] (a date-time without a zone), ["zoned_time", text as
 * Debezium writes it], ["duration", seconds, nano of second], ["list", [meanings]], ["map", [[key, value]...]],
 * ["struct", {field: meaning}].
 */
public final class ConnectRecords {

    static final JsonNodeFactory JSON = JsonNodeFactory.instance;
    static final ObjectMapper MAPPER = new ObjectMapper();
    static final String TOPIC = "reference";

    /** A value as Connect holds it, and what it means. */
    record Cell(Object value, JsonNode meaning) {}

    // --- meanings and values ---------------------------------------------------------------------------------

    static ArrayNode tag(String name) {
        return JSON.arrayNode().add(name);
    }

    static Object valueOf(Cell cell) {
        return cell == null ? null : cell.value();
    }

    static JsonNode meaningOf(Cell cell) {
        return cell == null ? JSON.nullNode() : cell.meaning();
    }

    static Cell i8(int v) {
        return new Cell((byte) v, tag("int").add(v));
    }

    static Cell i16(int v) {
        return new Cell((short) v, tag("int").add(v));
    }

    static Cell i32(int v) {
        return new Cell(v, tag("int").add(v));
    }

    static Cell i64(long v) {
        return new Cell(v, tag("int").add(v));
    }

    static Cell f32(float v) {
        return new Cell(v, tag("float32").add(Float.floatToRawIntBits(v)));
    }

    static Cell f64(double v) {
        return new Cell(v, tag("float64").add(Double.doubleToRawLongBits(v)));
    }

    static Cell bool(boolean v) {
        return new Cell(v, tag("boolean").add(v));
    }

    static Cell text(String v) {
        return new Cell(v, tag("string").add(v));
    }

    static String b64(byte[] v) {
        return Base64.getEncoder().encodeToString(v);
    }

    static Cell bytes(byte[] v) {
        return new Cell(v, tag("bytes").add(b64(v)));
    }

    static ArrayNode decimalMeaning(BigDecimal d) {
        return tag("decimal").add(d.unscaledValue().toString()).add(d.scale());
    }

    /** A Connect Decimal of `scale` (exactly `text`: a value that would need rounding throws). */
    static Cell decimal(String text, int scale) {
        BigDecimal d = new BigDecimal(text).setScale(scale);
        return new Cell(d, decimalMeaning(d));
    }

    static Cell connectDate(LocalDate d) {  // Connect's Date: a java.util.Date at midnight UTC
        return new Cell(new java.util.Date(Math.multiplyExact(d.toEpochDay(), 86_400_000L)),
                tag("date").add(d.toEpochDay()));
    }

    static long exactly(long nanos, long unit) {
        if (nanos % unit != 0) {
            throw new IllegalArgumentException(nanos + " ns is no whole number of units of " + unit + " ns");
        }
        return nanos / unit;
    }

    static Cell connectTime(LocalTime t) {  // Connect's Time: milliseconds of the day, as a java.util.Date on 1970-01-01
        return new Cell(new java.util.Date(exactly(t.toNanoOfDay(), 1_000_000)), tag("time").add(t.toNanoOfDay()));
    }

    static ArrayNode instantMeaning(Instant i) {
        return tag("instant").add(i.getEpochSecond()).add(i.getNano());
    }

    static Cell connectTimestamp(Instant i) {  // Connect's Timestamp: milliseconds since the epoch, as a java.util.Date
        exactly(i.getNano(), 1_000_000);
        return new Cell(java.util.Date.from(i), instantMeaning(i));
    }

    static Cell dbzDate(LocalDate d) {  // io.debezium.time.Date: days since the epoch
        return new Cell(Math.toIntExact(d.toEpochDay()), tag("date").add(d.toEpochDay()));
    }

    static Cell dbzTime(LocalTime t) {  // io.debezium.time.Time: milliseconds of the day
        return new Cell(Math.toIntExact(exactly(t.toNanoOfDay(), 1_000_000)), tag("time").add(t.toNanoOfDay()));
    }

    /** io.debezium.time.MicroTime: microseconds of the day (PostgreSQL's 24:00:00 included, so nanoseconds in). */
    static Cell dbzMicroTime(long nanosOfDay) {
        return new Cell(exactly(nanosOfDay, 1_000), tag("time").add(nanosOfDay));
    }

    static Cell dbzNanoTime(long nanosOfDay) {
        return new Cell(nanosOfDay, tag("time").add(nanosOfDay));
    }

    static ArrayNode localMeaning(LocalDateTime t) {
        return tag("local").add(t.toEpochSecond(ZoneOffset.UTC)).add(t.getNano());
    }

    static Cell dbzTimestamp(LocalDateTime t) {  // io.debezium.time.Timestamp: milliseconds since 1970-01-01T00:00
        exactly(t.getNano(), 1_000_000);
        return new Cell(t.toInstant(ZoneOffset.UTC).toEpochMilli(), localMeaning(t));
    }

    static Cell dbzMicroTimestamp(LocalDateTime t) {
        long micros = Math.addExact(Math.multiplyExact(t.toEpochSecond(ZoneOffset.UTC), 1_000_000L),
                exactly(t.getNano(), 1_000));
        return new Cell(micros, localMeaning(t));
    }

    static Cell dbzNanoTimestamp(LocalDateTime t) {
        long nanos = Math.addExact(Math.multiplyExact(t.toEpochSecond(ZoneOffset.UTC), 1_000_000_000L), t.getNano());
        return new Cell(nanos, localMeaning(t));
    }

    static Cell zonedTimestamp(OffsetDateTime t) {  // io.debezium.time.ZonedTimestamp's formatter
        return new Cell(t.format(DateTimeFormatter.ISO_OFFSET_DATE_TIME), instantMeaning(t.toInstant()));
    }

    static Cell zonedTime(OffsetTime t) {  // io.debezium.time.ZonedTime's formatter
        String text = t.format(DateTimeFormatter.ISO_OFFSET_TIME);
        return new Cell(text, tag("zoned_time").add(text));
    }

    static Cell microDuration(Duration d) {  // io.debezium.time.MicroDuration: microseconds
        long micros = Math.addExact(Math.multiplyExact(d.getSeconds(), 1_000_000L), exactly(d.getNano(), 1_000));
        return new Cell(micros, tag("duration").add(d.getSeconds()).add(d.getNano()));
    }

    static Cell variableScale(String text) {  // io.debezium.data.VariableScaleDecimal: {scale, unscaled bytes}
        BigDecimal d = new BigDecimal(text);
        Struct s = new Struct(VARIABLE_SCALE).put("scale", d.scale()).put("value", d.unscaledValue().toByteArray());
        return new Cell(s, decimalMeaning(d));
    }

    static Cell bits(BitSet b) {  // io.debezium.data.Bits: BitSet.toByteArray()
        return bytes(b.toByteArray());
    }

    static byte[] wkbPoint(double x, double y) {  // OGC WKB of a 2D point, little-endian, as Debezium builds it
        ByteBuffer wkb = ByteBuffer.allocate(21);
        wkb.put((byte) 1);
        wkb.order(ByteOrder.LITTLE_ENDIAN);
        wkb.putInt(1);
        wkb.putDouble(x);
        wkb.putDouble(y);
        return wkb.array();
    }

    static Cell geometry(Schema schema, byte[] wkb, Integer srid) {
        return struct(schema, Map.of(), "wkb", bytes(wkb), "srid", srid == null ? null : i32(srid));
    }

    static Cell point(double x, double y) {  // Debezium's Point.createValue(schema, x, y): no srid
        return struct(POINT, Map.of(), "x", f64(x), "y", f64(y), "wkb", bytes(wkbPoint(x, y)));
    }

    static Cell list(Cell... items) {
        List<Object> values = new ArrayList<>();
        ArrayNode meanings = JSON.arrayNode();
        for (Cell item : items) {
            values.add(valueOf(item));
            meanings.add(meaningOf(item));
        }
        return new Cell(values, tag("list").add(meanings));
    }

    /** A map of alternating keys and values. */
    static Cell map(Cell... keysAndValues) {
        Map<Object, Object> values = new LinkedHashMap<>();
        ArrayNode meanings = JSON.arrayNode();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            values.put(valueOf(keysAndValues[i]), valueOf(keysAndValues[i + 1]));
            meanings.add(JSON.arrayNode().add(meaningOf(keysAndValues[i])).add(meaningOf(keysAndValues[i + 1])));
        }
        return new Cell(values, tag("map").add(meanings));
    }

    /** A struct of alternating field names and cells; a field left out is null, or its default (`defaults`). */
    static Cell struct(Schema schema, Map<String, Cell> defaults, Object... namesAndCells) {
        Map<String, Cell> cells = new LinkedHashMap<>();
        for (int i = 0; i < namesAndCells.length; i += 2) {
            cells.put((String) namesAndCells[i], (Cell) namesAndCells[i + 1]);
        }
        return struct(schema, defaults, cells);
    }

    static Cell struct(Schema schema, Map<String, Cell> defaults, Map<String, Cell> cells) {
        Struct value = new Struct(schema);
        ObjectNode meanings = JSON.objectNode();
        for (String name : cells.keySet()) {
            if (schema.field(name) == null) {
                throw new IllegalArgumentException("no field " + name + " in " + schema.name());
            }
        }
        for (Field field : schema.fields()) {
            Cell cell = cells.get(field.name());
            if (cell != null) {
                value.put(field, cell.value());
            }
            meanings.set(field.name(), meaningOf(cell != null ? cell : defaults.get(field.name())));
        }
        value.validate();
        return new Cell(value, tag("struct").add(meanings));
    }

    // --- schemas: Connect's, and Debezium's semantic types as Debezium builds them --------------------------------

    static final String PRECISION = "connect.decimal.precision";

    static SchemaBuilder debezium(SchemaBuilder type, String name) {
        return type.name(name).version(1);
    }

    static Schema optional(SchemaBuilder builder) {
        return builder.optional().build();
    }

    static final Schema VARIABLE_SCALE = debezium(SchemaBuilder.struct(), "io.debezium.data.VariableScaleDecimal")
            .doc("Variable scaled decimal").field("scale", Schema.INT32_SCHEMA).field("value", Schema.BYTES_SCHEMA)
            .optional().build();
    static final Schema GEOMETRY = debezium(SchemaBuilder.struct(), "io.debezium.data.geometry.Geometry")
            .doc("Geometry").field("wkb", Schema.BYTES_SCHEMA).field("srid", Schema.OPTIONAL_INT32_SCHEMA)
            .optional().build();
    static final Schema GEOGRAPHY = debezium(SchemaBuilder.struct(), "io.debezium.data.geometry.Geography")
            .doc("Geography").field("wkb", Schema.BYTES_SCHEMA).field("srid", Schema.OPTIONAL_INT32_SCHEMA)
            .optional().build();
    static final Schema POINT = debezium(SchemaBuilder.struct(), "io.debezium.data.geometry.Point")
            .doc("Geometry (POINT)").field("x", Schema.FLOAT64_SCHEMA).field("y", Schema.FLOAT64_SCHEMA)
            .field("wkb", Schema.OPTIONAL_BYTES_SCHEMA).field("srid", Schema.OPTIONAL_INT32_SCHEMA)
            .optional().build();
    static final Schema INNER = SchemaBuilder.struct().name("server1.inventory.all_types.inner")
            .field("at", optional(org.apache.kafka.connect.data.Timestamp.builder()))
            .field("local", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.MicroTimestamp")))
            .optional().build();
    static final Schema NESTED = SchemaBuilder.struct().name("server1.inventory.all_types.nested")
            .field("name", Schema.OPTIONAL_STRING_SCHEMA).field("n", Schema.INT32_SCHEMA).field("inner", INNER)
            .optional().build();
    static final Schema PERSON = SchemaBuilder.struct().name("server1.inventory.all_types.person")
            .field("name", Schema.STRING_SCHEMA).field("born", optional(org.apache.kafka.connect.data.Date.builder()))
            .optional().build();
    static final Schema ENUM_SIZE = optional(debezium(SchemaBuilder.string(), "io.debezium.data.Enum")
            .parameter("allowed", "small,medium,large"));

    /** Fields with a default: (schema, the default's cell). */
    static final Map<String, Cell> DEFAULTS = new LinkedHashMap<>();
    static final Map<String, Schema> DEFAULTED = new LinkedHashMap<>();

    static {
        defaulted("d_int", SchemaBuilder.int32().optional(), i32(42));
        defaulted("d_text", SchemaBuilder.string(), text("none"));  // required, with a default
        defaulted("d_price", Decimal.builder(2).parameter(PRECISION, "6").optional(), decimal("1.50", 2));
        defaulted("d_at", org.apache.kafka.connect.data.Timestamp.builder().optional(),
                connectTimestamp(Instant.parse("2000-01-01T00:00:00Z")));
        defaulted("d_size", debezium(SchemaBuilder.string(), "io.debezium.data.Enum")
                .parameter("allowed", "small,medium,large").optional(), text("medium"));
    }

    static void defaulted(String name, SchemaBuilder builder, Cell value) {
        DEFAULTS.put(name, value);
        DEFAULTED.put(name, builder.defaultValue(value.value()).build());
    }

    /** Every type but maps: a batch of these is read whole by lakesink's batch path. */
    static SchemaBuilder flatFields(SchemaBuilder row) {
        row.field("id", Schema.INT32_SCHEMA)
                .field("i8", Schema.OPTIONAL_INT8_SCHEMA).field("i16", Schema.OPTIONAL_INT16_SCHEMA)
                .field("i32", Schema.OPTIONAL_INT32_SCHEMA).field("i64", Schema.OPTIONAL_INT64_SCHEMA)
                .field("f32", Schema.OPTIONAL_FLOAT32_SCHEMA).field("f64", Schema.OPTIONAL_FLOAT64_SCHEMA)
                .field("flag", Schema.OPTIONAL_BOOLEAN_SCHEMA).field("txt", Schema.OPTIONAL_STRING_SCHEMA)
                .field("raw", Schema.OPTIONAL_BYTES_SCHEMA)
                .field("dec", optional(Decimal.builder(2).parameter(PRECISION, "10")))
                .field("dec38", optional(Decimal.builder(0).parameter(PRECISION, "38")))
                .field("dec_fine", optional(Decimal.builder(10)))  // no precision: 38
                .field("c_date", optional(org.apache.kafka.connect.data.Date.builder()))
                .field("c_time", optional(org.apache.kafka.connect.data.Time.builder()))
                .field("c_ts", optional(org.apache.kafka.connect.data.Timestamp.builder()))
                .field("d_date", optional(debezium(SchemaBuilder.int32(), "io.debezium.time.Date")))
                .field("d_time", optional(debezium(SchemaBuilder.int32(), "io.debezium.time.Time")))
                .field("d_micro_time", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.MicroTime")))
                .field("d_nano_time", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.NanoTime")))
                .field("d_ts", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.Timestamp")))
                .field("d_micro_ts", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.MicroTimestamp")))
                .field("d_nano_ts", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.NanoTimestamp")))
                .field("d_zoned_ts", optional(debezium(SchemaBuilder.string(), "io.debezium.time.ZonedTimestamp")))
                .field("d_zoned_time", optional(debezium(SchemaBuilder.string(), "io.debezium.time.ZonedTime")))
                .field("d_year", optional(debezium(SchemaBuilder.int32(), "io.debezium.time.Year")))
                .field("d_duration", optional(debezium(SchemaBuilder.int64(), "io.debezium.time.MicroDuration")))
                .field("vsd", VARIABLE_SCALE)
                .field("doc", optional(debezium(SchemaBuilder.string(), "io.debezium.data.Json")))
                .field("xml", optional(debezium(SchemaBuilder.string(), "io.debezium.data.Xml")))
                .field("uid", optional(debezium(SchemaBuilder.string(), "io.debezium.data.Uuid")))
                .field("size", ENUM_SIZE)
                .field("sizes", optional(debezium(SchemaBuilder.string(), "io.debezium.data.EnumSet")
                        .parameter("allowed", "small,medium,large")))
                .field("bits", optional(debezium(SchemaBuilder.bytes(), "io.debezium.data.Bits")
                        .parameter("length", "12")))
                .field("geom", GEOMETRY).field("geog", GEOGRAPHY).field("point", POINT)
                .field("tags", optional(SchemaBuilder.array(Schema.OPTIONAL_STRING_SCHEMA)))
                .field("floats", optional(SchemaBuilder.array(Schema.FLOAT32_SCHEMA)))
                .field("doubles", optional(SchemaBuilder.array(Schema.FLOAT64_SCHEMA)))
                .field("amounts", optional(SchemaBuilder.array(optional(Decimal.builder(3).parameter(PRECISION, "9")))))
                .field("moments", optional(SchemaBuilder.array(optional(org.apache.kafka.connect.data.Timestamp.builder()))))
                .field("matrix", optional(SchemaBuilder.array(optional(SchemaBuilder.array(Schema.OPTIONAL_INT32_SCHEMA)))))
                .field("nested", NESTED)
                .field("people", optional(SchemaBuilder.array(PERSON)));
        DEFAULTED.forEach(row::field);
        return row;
    }

    static final Schema FLAT = flatFields(SchemaBuilder.struct().name("server1.inventory.all_types.Value")).build();
    static final Schema FULL = flatFields(SchemaBuilder.struct().name("server1.inventory.all_types.Value"))
            .field("attrs", optional(SchemaBuilder.map(Schema.STRING_SCHEMA, Schema.OPTIONAL_INT64_SCHEMA)))
            .field("codes", optional(SchemaBuilder.map(Schema.INT32_SCHEMA, Schema.OPTIONAL_STRING_SCHEMA)))
            .field("prices", optional(SchemaBuilder.map(Schema.STRING_SCHEMA,
                    optional(Decimal.builder(2).parameter(PRECISION, "12")))))
            .field("by_day", optional(SchemaBuilder.map(org.apache.kafka.connect.data.Date.SCHEMA,
                    Schema.OPTIONAL_STRING_SCHEMA)))
            .build();
    static final Schema KEY = SchemaBuilder.struct().name("server1.inventory.all_types.Key")
            .field("id", Schema.INT32_SCHEMA).build();

    // --- the rows ------------------------------------------------------------------------------------------------

    static final String UNICODE = "h\u00e9llo \u2713 \ud83d\ude00 \u65e5\u672c \"quoted\" back\\slash\ttab\nline \u0001";
    static final String NINES_38 = "9".repeat(38);
    static final LocalDate FIRST_DAY = LocalDate.of(1, 1, 1);
    static final LocalDate LAST_DAY = LocalDate.of(9999, 12, 31);
    static final long DAY_NANOS = 86_400_000_000_000L;

    static byte[] everyByte() {
        byte[] all = new byte[256];
        for (int i = 0; i < all.length; i++) {
            all[i] = (byte) i;
        }
        return all;
    }

    static BitSet bitsOf(int... set) {
        BitSet b = new BitSet();
        for (int i : set) {
            b.set(i);
        }
        return b;
    }

    /** The cells of base row `base` (1 max, 2 min, 3 zero, 4 fractions, 5 nulls, 6 typical), id `id`. */
    static Map<String, Cell> row(int base, int id) {
        Map<String, Cell> c = new LinkedHashMap<>();
        c.put("id", i32(id));
        switch (base) {
            case 1 -> {
                c.put("i8", i8(Byte.MAX_VALUE));
                c.put("i16", i16(Short.MAX_VALUE));
                c.put("i32", i32(Integer.MAX_VALUE));
                c.put("i64", i64(Long.MAX_VALUE));
                c.put("f32", f32(Float.MAX_VALUE));
                c.put("f64", f64(Double.MAX_VALUE));
                c.put("flag", bool(true));
                c.put("txt", text(UNICODE));
                c.put("raw", bytes(everyByte()));
                c.put("dec", decimal("99999999.99", 2));
                c.put("dec38", decimal(NINES_38, 0));
                c.put("dec_fine", decimal("9999999999999999999999999999.9999999999", 10));
                c.put("c_date", connectDate(LAST_DAY));
                c.put("c_time", connectTime(LocalTime.of(23, 59, 59, 999_000_000)));
                c.put("c_ts", connectTimestamp(Instant.parse("9999-12-31T23:59:59.999Z")));
                c.put("d_date", dbzDate(LAST_DAY));
                c.put("d_time", dbzTime(LocalTime.of(23, 59, 59, 999_000_000)));
                c.put("d_micro_time", dbzMicroTime(DAY_NANOS));  // PostgreSQL's 24:00:00
                c.put("d_nano_time", dbzNanoTime(DAY_NANOS - 1));
                c.put("d_ts", dbzTimestamp(LocalDateTime.of(9999, 12, 31, 23, 59, 59, 999_000_000)));
                c.put("d_micro_ts", dbzMicroTimestamp(LocalDateTime.of(9999, 12, 31, 23, 59, 59, 999_999_000)));
                c.put("d_nano_ts", dbzNanoTimestamp(LocalDateTime.of(2262, 4, 11, 23, 47, 16, 854_775_807)));
                c.put("d_zoned_ts", zonedTimestamp(OffsetDateTime.of(9999, 12, 31, 23, 59, 59, 999_999_999,
                        ZoneOffset.UTC)));
                c.put("d_zoned_time", zonedTime(OffsetTime.of(23, 59, 59, 999_999_000, ZoneOffset.ofHours(14))));
                c.put("d_year", i32(2155));
                c.put("d_duration", microDuration(Duration.ofDays(3_652_425).plusNanos(999_999_000)));
                c.put("vsd", variableScale("99999999999999999999.999999999999999999"));
                c.put("doc", text("{\"a\":[1,2.5,{\"b\":null}],\"\u00fc\":\"\\u0000\"}"));
                c.put("xml", text("<a b=\"1\">\u00fc</a>"));
                c.put("uid", text("ffffffff-ffff-ffff-ffff-ffffffffffff"));
                c.put("size", text("large"));
                c.put("sizes", text("small,medium,large"));
                c.put("bits", bits(bitsOf(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)));
                c.put("geom", geometry(GEOMETRY, wkbPoint(1, 2), 4326));
                c.put("geog", geometry(GEOGRAPHY, wkbPoint(-180, 90), 4326));
                c.put("point", point(Double.MAX_VALUE, -Double.MAX_VALUE));
                c.put("tags", list(text("a"), null, text("\u00fc")));
                c.put("floats", list(f32(Float.MAX_VALUE), f32(-Float.MAX_VALUE), f32(Float.MIN_VALUE),
                        f32(Float.MIN_NORMAL), f32(16_777_216f)));
                c.put("doubles", list(f64(Double.MAX_VALUE), f64(-Double.MAX_VALUE), f64(Double.MIN_VALUE),
                        f64(Double.MIN_NORMAL), f64(9_007_199_254_740_993d)));
                c.put("amounts", list(decimal("999999.999", 3), decimal("-999999.999", 3), null));
                c.put("moments", list(connectTimestamp(Instant.parse("9999-12-31T23:59:59.999Z")),
                        connectTimestamp(Instant.parse("0001-01-01T00:00:00Z")), null));
                c.put("matrix", list(list(i32(1), i32(Integer.MAX_VALUE)), list(), null, list((Cell) null)));
                c.put("nested", struct(NESTED, Map.of(), "name", text("n\u00e9"), "n", i32(7), "inner",
                        struct(INNER, Map.of(), "at", connectTimestamp(Instant.parse("2024-02-29T12:00:00.001Z")),
                                "local", dbzMicroTimestamp(LocalDateTime.of(2024, 2, 29, 12, 0, 0, 1_000)))));
                c.put("people", list(struct(PERSON, Map.of(), "name", text("a"), "born", connectDate(FIRST_DAY)),
                        null));
                c.put("d_int", i32(7));
                c.put("d_text", text("given"));
                c.put("d_price", decimal("9999.99", 2));
                c.put("d_at", connectTimestamp(Instant.parse("2024-03-01T10:00:00.123Z")));
                c.put("d_size", text("large"));
            }
            case 2 -> {
                c.put("i8", i8(Byte.MIN_VALUE));
                c.put("i16", i16(Short.MIN_VALUE));
                c.put("i32", i32(Integer.MIN_VALUE));
                c.put("i64", i64(Long.MIN_VALUE));
                c.put("f32", f32(-Float.MAX_VALUE));
                c.put("f64", f64(-Double.MAX_VALUE));
                c.put("flag", bool(false));
                c.put("txt", text(""));
                c.put("raw", bytes(new byte[0]));
                c.put("dec", decimal("-99999999.99", 2));
                c.put("dec38", decimal("-" + NINES_38, 0));
                c.put("dec_fine", decimal("-9999999999999999999999999999.9999999999", 10));
                c.put("c_date", connectDate(FIRST_DAY));
                c.put("c_time", connectTime(LocalTime.MIDNIGHT));
                c.put("c_ts", connectTimestamp(Instant.parse("0001-01-01T00:00:00Z")));
                c.put("d_date", dbzDate(FIRST_DAY));
                c.put("d_time", dbzTime(LocalTime.MIDNIGHT));
                c.put("d_micro_time", dbzMicroTime(0));
                c.put("d_nano_time", dbzNanoTime(0));
                c.put("d_ts", dbzTimestamp(LocalDateTime.of(1, 1, 1, 0, 0)));
                c.put("d_micro_ts", dbzMicroTimestamp(LocalDateTime.of(1, 1, 1, 0, 0, 0, 1_000)));
                c.put("d_nano_ts", dbzNanoTimestamp(LocalDateTime.of(1677, 9, 21, 0, 12, 44, 1)));  // floored
                c.put("d_zoned_ts", zonedTimestamp(OffsetDateTime.of(1, 1, 1, 1, 0, 0, 0, ZoneOffset.ofHours(1))));
                c.put("d_zoned_time", zonedTime(OffsetTime.of(0, 0, 0, 0, ZoneOffset.ofHours(-12))));
                c.put("d_year", i32(1901));
                c.put("d_duration", microDuration(Duration.ofDays(-3_652_425)));
                c.put("vsd", variableScale("-99999999999999999999.999999999999999999"));
                c.put("doc", text("null"));
                c.put("xml", text(""));
                c.put("uid", text("00000000-0000-0000-0000-000000000000"));
                c.put("size", text("small"));
                c.put("sizes", text(""));
                c.put("bits", bits(new BitSet()));
                c.put("geom", geometry(GEOMETRY, new byte[0], null));
                c.put("geog", geometry(GEOGRAPHY, wkbPoint(180, -90), null));
                c.put("point", point(-Double.MIN_VALUE, Double.MIN_VALUE));
                c.put("tags", list());
                c.put("floats", list());
                c.put("doubles", list());
                c.put("amounts", list());
                c.put("moments", list());
                c.put("matrix", list());
                c.put("nested", struct(NESTED, Map.of(), "name", null, "n", i32(Integer.MIN_VALUE), "inner", null));
                c.put("people", list());
                // the defaulted fields are left null: Connect writes their defaults
            }
            case 3 -> {
                c.put("i8", i8(0));
                c.put("i16", i16(0));
                c.put("i32", i32(0));
                c.put("i64", i64(0));
                c.put("f32", f32(0f));
                c.put("f64", f64(0d));
                c.put("flag", bool(false));
                c.put("txt", text("0"));
                c.put("raw", bytes(new byte[] {0}));
                c.put("dec", decimal("0", 2));
                c.put("dec38", decimal("0", 0));
                c.put("dec_fine", decimal("0", 10));
                c.put("c_date", connectDate(LocalDate.EPOCH));
                c.put("c_time", connectTime(LocalTime.MIDNIGHT));
                c.put("c_ts", connectTimestamp(Instant.EPOCH));
                c.put("d_date", dbzDate(LocalDate.EPOCH));
                c.put("d_time", dbzTime(LocalTime.MIDNIGHT));
                c.put("d_micro_time", dbzMicroTime(0));
                c.put("d_nano_time", dbzNanoTime(0));
                c.put("d_ts", dbzTimestamp(LocalDateTime.of(1970, 1, 1, 0, 0)));
                c.put("d_micro_ts", dbzMicroTimestamp(LocalDateTime.of(1970, 1, 1, 0, 0)));
                c.put("d_nano_ts", dbzNanoTimestamp(LocalDateTime.of(1970, 1, 1, 0, 0)));
                c.put("d_zoned_ts", zonedTimestamp(OffsetDateTime.of(1970, 1, 1, 0, 0, 0, 0, ZoneOffset.UTC)));
                c.put("d_zoned_time", zonedTime(OffsetTime.of(0, 0, 0, 0, ZoneOffset.UTC)));
                c.put("d_year", i32(0));
                c.put("d_duration", microDuration(Duration.ZERO));
                c.put("vsd", variableScale("0"));
                c.put("doc", text("{}"));
                c.put("xml", text("<a/>"));
                c.put("uid", text("123e4567-e89b-12d3-a456-426614174000"));
                c.put("size", text("medium"));
                c.put("sizes", text("medium"));
                c.put("bits", bits(bitsOf(0)));
                c.put("geom", geometry(GEOMETRY, wkbPoint(0, 0), 0));
                c.put("geog", geometry(GEOGRAPHY, wkbPoint(0, 0), 0));
                c.put("point", point(0, 0));
                c.put("tags", list(text("")));
                c.put("floats", list(f32(0f), f32(-0f)));
                c.put("doubles", list(f64(0d), f64(-0d)));
                c.put("amounts", list(decimal("0", 3)));
                c.put("moments", list(connectTimestamp(Instant.EPOCH)));
                c.put("matrix", list(list(i32(0))));
                c.put("nested", struct(NESTED, Map.of(), "name", text(""), "n", i32(0), "inner",
                        struct(INNER, Map.of())));
                c.put("people", list(struct(PERSON, Map.of(), "name", text(""))));
                c.put("d_int", i32(0));
                c.put("d_text", text(""));
                c.put("d_price", decimal("0", 2));
                c.put("d_at", connectTimestamp(Instant.EPOCH));
                c.put("d_size", text("small"));
            }
            case 4 -> {
                c.put("i8", i8(-1));
                c.put("i16", i16(-1));
                c.put("i32", i32(-1));
                c.put("i64", i64(-1));
                c.put("f32", f32(0.1f));
                c.put("f64", f64(0.1d));
                c.put("flag", bool(true));
                c.put("txt", text("\ud83d\udc4d\u0301 \u00a0 \u2028 \u202e end"));
                c.put("raw", bytes(new byte[] {(byte) 0xff, (byte) 0xfe, 0x0a, 0x22}));
                c.put("dec", decimal("-0.01", 2));
                c.put("dec38", decimal("1", 0));
                c.put("dec_fine", decimal("0.0000000001", 10));
                c.put("c_date", connectDate(LocalDate.of(1969, 12, 31)));
                c.put("c_time", connectTime(LocalTime.of(0, 0, 0, 1_000_000)));
                c.put("c_ts", connectTimestamp(Instant.parse("1969-12-31T23:59:59.999Z")));  // -1 ms
                c.put("d_date", dbzDate(LocalDate.of(1969, 12, 31)));
                c.put("d_time", dbzTime(LocalTime.of(0, 0, 0, 1_000_000)));
                c.put("d_micro_time", dbzMicroTime(1_000));
                c.put("d_nano_time", dbzNanoTime(1_999));  // floored to 1 microsecond
                c.put("d_ts", dbzTimestamp(LocalDateTime.of(1969, 12, 31, 23, 59, 59, 999_000_000)));
                c.put("d_micro_ts", dbzMicroTimestamp(LocalDateTime.of(1969, 12, 31, 23, 59, 59, 999_999_000)));
                c.put("d_nano_ts", dbzNanoTimestamp(LocalDateTime.of(1969, 12, 31, 23, 59, 59, 999_999_999)));
                c.put("d_zoned_ts", zonedTimestamp(OffsetDateTime.of(2024, 3, 5, 10, 15, 30, 123_456_789,
                        ZoneOffset.ofHoursMinutes(5, 30))));
                c.put("d_zoned_time", zonedTime(OffsetTime.of(10, 15, 30, 120_000_000, ZoneOffset.ofHoursMinutes(-9, -30))));
                c.put("d_year", i32(1970));
                c.put("d_duration", microDuration(Duration.ofNanos(-1_000)));
                c.put("vsd", variableScale("0.000000000000000001"));
                c.put("doc", text("[1, 2.50, \"x\"]"));
                c.put("xml", text("<x>&amp;</x>"));
                c.put("uid", text("6f1c8e1e-9c53-4a54-8d1b-2b3c4d5e6f70"));
                c.put("size", text("medium"));
                c.put("sizes", text("small,large"));
                c.put("bits", bits(bitsOf(11)));
                c.put("geom", geometry(GEOMETRY, wkbPoint(0.1, -0.2), 3857));
                c.put("geog", geometry(GEOGRAPHY, wkbPoint(4.9, 52.37), 4326));
                c.put("point", point(0.1, 1e-300));
                c.put("tags", list(null, null));
                c.put("floats", list(f32(0.1f), f32(-0.2f), f32(1e-7f), f32(3.3333333f), f32(1.17549435E-38f)));
                c.put("doubles", list(f64(0.1d), f64(-2.25e-10), f64(1e-300), f64(1d / 3), f64(123456789.123)));
                c.put("amounts", list(decimal("0.001", 3), decimal("-0.001", 3), decimal("123.450", 3)));
                c.put("moments", list(connectTimestamp(Instant.parse("1969-12-31T23:59:59.999Z")),
                        connectTimestamp(Instant.parse("1970-01-01T00:00:00.001Z"))));
                c.put("matrix", list(list(null, i32(-1)), null));
                c.put("nested", struct(NESTED, Map.of(), "n", i32(-1), "inner",
                        struct(INNER, Map.of(), "at", connectTimestamp(Instant.parse("1969-12-31T23:59:59.999Z")),
                                "local", dbzMicroTimestamp(LocalDateTime.of(1969, 12, 31, 23, 59, 59, 999_999_000)))));
                c.put("people", list(struct(PERSON, Map.of(), "name", text("b"),
                        "born", connectDate(LocalDate.of(1969, 12, 31)))));
                c.put("d_int", i32(-1));
                c.put("d_text", text("\u00fc"));
                c.put("d_price", decimal("-0.01", 2));
                c.put("d_at", connectTimestamp(Instant.parse("1969-12-31T23:59:59.999Z")));
            }
            case 5 -> {
                // every optional field null; the required field with a default left unset
            }
            case 6 -> {
                c.put("i8", i8(42));
                c.put("i16", i16(-1234));
                c.put("i32", i32(20240301));
                c.put("i64", i64(1_709_287_200_123L));
                c.put("f32", f32(21.5f));
                c.put("f64", f64(-3.75e2));
                c.put("flag", bool(true));
                c.put("txt", text("Stra\u00dfe 12, K\u00f8benhavn"));
                c.put("raw", bytes("bin\u00e4r".getBytes(StandardCharsets.UTF_8)));
                c.put("dec", decimal("12345678.90", 2));
                c.put("dec38", decimal("12345678901234567890123456789012345678", 0));
                c.put("dec_fine", decimal("-1234567890123456789012345678.9012345678", 10));
                c.put("c_date", connectDate(LocalDate.of(2024, 2, 29)));
                c.put("c_time", connectTime(LocalTime.of(12, 34, 56, 789_000_000)));
                c.put("c_ts", connectTimestamp(Instant.parse("2024-03-01T10:00:00.123Z")));
                c.put("d_date", dbzDate(LocalDate.of(1900, 1, 1)));
                c.put("d_time", dbzTime(LocalTime.of(12, 34, 56, 789_000_000)));
                c.put("d_micro_time", dbzMicroTime(LocalTime.of(12, 34, 56, 123_456_000).toNanoOfDay()));
                c.put("d_nano_time", dbzNanoTime(LocalTime.of(12, 34, 56, 123_456_789).toNanoOfDay()));
                c.put("d_ts", dbzTimestamp(LocalDateTime.of(1900, 1, 1, 0, 0)));
                c.put("d_micro_ts", dbzMicroTimestamp(LocalDateTime.of(1969, 7, 20, 20, 17, 40, 123_456_000)));
                c.put("d_nano_ts", dbzNanoTimestamp(LocalDateTime.of(2023, 11, 14, 22, 13, 20, 123_456_789)));
                c.put("d_zoned_ts", zonedTimestamp(OffsetDateTime.of(1969, 12, 31, 23, 59, 59, 500_000_000,
                        ZoneOffset.ofHours(-1))));
                c.put("d_zoned_time", zonedTime(OffsetTime.of(10, 15, 30, 0, ZoneOffset.ofHours(2))));
                c.put("d_year", i32(2024));
                c.put("d_duration", microDuration(Duration.ofHours(1).plusNanos(1_000)));
                c.put("vsd", variableScale("-123.456"));
                c.put("doc", text("{\"k\":\"v\"}"));
                c.put("xml", text("<doc/>"));
                c.put("uid", text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"));
                c.put("size", text("small"));
                c.put("sizes", text("large"));
                c.put("bits", bits(bitsOf(1, 3, 5, 8)));
                c.put("geom", geometry(GEOMETRY, wkbPoint(4.9, 52.37), 4326));
                c.put("geog", geometry(GEOGRAPHY, wkbPoint(4.9, 52.37), null));
                c.put("point", point(4.9, 52.37));
                c.put("tags", list(text("x"), text("y")));
                c.put("floats", list(f32(21.5f)));
                c.put("doubles", list(f64(-3.75e2)));
                c.put("amounts", list(decimal("12.500", 3)));
                c.put("moments", list(connectTimestamp(Instant.parse("2024-03-01T10:00:00.123Z"))));
                c.put("matrix", list(list(i32(1)), list(i32(2), i32(3))));
                c.put("nested", struct(NESTED, Map.of(), "name", text("n6"), "n", i32(6), "inner", null));
                c.put("people", list(struct(PERSON, Map.of(), "name", text("c"), "born",
                        connectDate(LocalDate.of(1900, 1, 1)))));
                c.put("d_int", null);
                c.put("d_text", text("typical"));
                c.put("d_at", null);
            }
            default -> throw new IllegalArgumentException("no base row " + base);
        }
        return c;
    }

    /** The map fields of base row `base`. */
    static Map<String, Cell> maps(int base) {
        Map<String, Cell> c = new LinkedHashMap<>();
        switch (base) {
            case 1 -> {
                c.put("attrs", map(text("x"), i64(Long.MAX_VALUE), text("y"), null, text("\u00fc \"k\""), i64(0)));
                c.put("codes", map(i32(1), text("one"), i32(-2), text("minus two"), i32(Integer.MAX_VALUE), null));
                c.put("prices", map(text("a"), decimal("9999999999.99", 2), text("b"), null));
                c.put("by_day", map(connectDate(LAST_DAY), text("last"), connectDate(FIRST_DAY), text("first")));
            }
            case 2, 3 -> {
                c.put("attrs", map());
                c.put("codes", map());
                c.put("prices", map());
                c.put("by_day", map());
            }
            case 4, 6 -> {
                c.put("attrs", map(text(""), i64(-1)));
                c.put("codes", map(i32(0), text("")));
                c.put("prices", map(text("p"), decimal("-0.01", 2)));
                c.put("by_day", map(connectDate(LocalDate.of(1969, 12, 31)), null));
            }
            default -> {
                // base 5: null maps
            }
        }
        return c;
    }

    // --- output -----------------------------------------------------------------------------------------------

    static JsonConverter converter(boolean isKey, Map<String, Object> config) {
        JsonConverter converter = new JsonConverter();
        converter.configure(config, isKey);
        return converter;
    }

    static final JsonConverter WRAPPED = converter(false, Map.of("schemas.enable", true, "decimal.format", "BASE64"));
    static final JsonConverter NUMERIC = converter(false, Map.of("schemas.enable", true, "decimal.format", "NUMERIC"));
    static final JsonConverter PLAIN = converter(false, Map.of("schemas.enable", false));
    static final JsonConverter KEYS = converter(true, Map.of("schemas.enable", true));

    static String encoded(JsonConverter converter, Schema schema, Object value) {
        byte[] bytes = converter.fromConnectData(TOPIC, schema, value);
        return bytes == null ? null : b64(bytes);
    }

    /** One record of `set` whose value is `value` (null: none) under `schema`. */
    static ObjectNode record(String set, int id, Schema schema, Cell value, String key) {
        ObjectNode out = JSON.objectNode();
        out.put("set", set);
        out.put("id", id);
        out.put("key", key);
        Object connect = valueOf(value);
        Schema written = value == null ? null : schema;  // a tombstone: no value, no schema
        out.put("value", encoded(WRAPPED, written, connect));
        out.put("plain", encoded(PLAIN, written, connect));
        out.put("numeric", encoded(NUMERIC, written, connect));
        out.set("expect", value == null ? JSON.nullNode() : value.meaning().get(1));
        return out;
    }

    static void print(ObjectNode node) throws Exception {
        System.out.write(MAPPER.writeValueAsBytes(node));  // UTF-8, whatever the platform's charset
        System.out.write('\n');
    }

    /** Append: the base rows under FLAT (ids 1-6) and FULL (maps too, ids 201-206), floating-point specials (id 7,
     * set "special"), and a record a decoder must refuse, naming the field. */
    static void append() throws Exception {
        for (int base = 1; base <= 6; base++) {
            print(record("flat", base, FLAT, struct(FLAT, DEFAULTS, row(base, base)), null));
        }
        for (int base = 1; base <= 6; base++) {
            Map<String, Cell> cells = row(base, 200 + base);
            cells.putAll(maps(base));
            print(record("full", 200 + base, FULL, struct(FULL, DEFAULTS, cells), null));
        }
        // IEEE specials, which the converter writes as the JSON strings "NaN", "Infinity", "-Infinity"
        print(record("special", 7, FLAT, struct(FLAT, DEFAULTS, "id", i32(7), "f32", f32(Float.NaN),
                "f64", f64(Double.NEGATIVE_INFINITY), "floats", list(f32(Float.POSITIVE_INFINITY),
                        f32(Float.NEGATIVE_INFINITY), f32(Float.NaN), f32(1.5f)),
                "doubles", list(f64(Double.NaN), f64(Double.POSITIVE_INFINITY), f64(-0.5))), null));
        // Connect checks a Decimal's scale, never its precision: the converter writes 11 digits for decimal(10,2)
        Map<String, Cell> cells = row(6, 900);
        cells.put("dec", decimal("123456789.01", 2));
        ObjectNode bad = record("flat", 900, FLAT, struct(FLAT, DEFAULTS, cells), null);
        bad.put("bad", "dec");
        print(bad);
    }

    static final Schema SOURCE = SchemaBuilder.struct().name("io.debezium.connector.postgresql.Source").version(1)
            .field("version", Schema.STRING_SCHEMA).field("connector", Schema.STRING_SCHEMA)
            .field("name", Schema.STRING_SCHEMA).field("ts_ms", Schema.INT64_SCHEMA)
            .field("snapshot", debezium(SchemaBuilder.string(), "io.debezium.data.Enum")
                    .parameter("allowed", "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental")
                    .defaultValue("false").optional().build())
            .field("db", Schema.STRING_SCHEMA).field("sequence", Schema.OPTIONAL_STRING_SCHEMA)
            .field("ts_us", Schema.OPTIONAL_INT64_SCHEMA).field("ts_ns", Schema.OPTIONAL_INT64_SCHEMA)
            .field("schema", Schema.STRING_SCHEMA).field("table", Schema.STRING_SCHEMA)
            .field("txId", Schema.OPTIONAL_INT64_SCHEMA).field("lsn", Schema.OPTIONAL_INT64_SCHEMA)
            .field("xmin", Schema.OPTIONAL_INT64_SCHEMA).build();
    static final Schema TRANSACTION = SchemaBuilder.struct().name("event.block").version(1)
            .field("id", Schema.STRING_SCHEMA).field("total_order", Schema.INT64_SCHEMA)
            .field("data_collection_order", Schema.INT64_SCHEMA).optional().build();

    static Schema envelope(Schema row) {  // Debezium 3's envelope: before, after, source, op, ts_ms/us/ns, transaction
        return SchemaBuilder.struct().name("server1.inventory.all_types.Envelope").version(2)
                .field("before", row).field("after", row).field("source", SOURCE)
                .field("op", Schema.STRING_SCHEMA).field("ts_ms", Schema.OPTIONAL_INT64_SCHEMA)
                .field("ts_us", Schema.OPTIONAL_INT64_SCHEMA).field("ts_ns", Schema.OPTIONAL_INT64_SCHEMA)
                .field("transaction", TRANSACTION).build();
    }

    static Schema optionalRow() {
        SchemaBuilder row = SchemaBuilder.struct().name(FULL.name()).optional();
        for (Field field : FULL.fields()) {
            row.field(field.name(), field.schema());
        }
        return row.build();
    }

    static final Schema OPTIONAL_ROW = optionalRow();
    static final Schema ENVELOPE = envelope(OPTIONAL_ROW);

    static Cell fullRow(int base, int id) {
        Map<String, Cell> cells = row(base, id);
        cells.putAll(maps(base));
        return struct(OPTIONAL_ROW, DEFAULTS, cells);
    }

    /** A Debezium change event of `op` at `lsn`; `before`/`after` rows or null; the key's id or null (truncate). */
    static void event(String op, long lsn, Integer id, Cell before, Cell after) throws Exception {
        Struct value = change(ENVELOPE, op, lsn, valueOf(before), valueOf(after));
        String key = id == null ? null : encoded(KEYS, KEY, new Struct(KEY).put("id", id));
        ObjectNode out = record("debezium", id == null ? -1 : id, ENVELOPE, new Cell(value, tag("struct")
                .add(after == null ? JSON.nullNode() : after.meaning().get(1))), key);
        out.put("op", op);
        out.put("lsn", lsn);
        print(out);
    }

    /** The Debezium change event of `op` at `lsn` in `envelope` (envelope(row)), its rows `before` and `after`. */
    static Struct change(Schema envelope, String op, long lsn, Object before, Object after) {
        long millis = 1_700_000_000_000L + lsn;
        Struct source = new Struct(SOURCE).put("version", "3.0.7.Final").put("connector", "postgresql")
                .put("name", "server1").put("ts_ms", millis).put("snapshot", op.equals("r") ? "true" : "false")
                .put("db", "inventory").put("sequence", "[\"" + (lsn - 1) + "\",\"" + lsn + "\"]")
                .put("ts_us", millis * 1000).put("ts_ns", millis * 1_000_000)
                .put("schema", "public").put("table", "all_types").put("txId", 500 + lsn).put("lsn", lsn);
        Struct value = new Struct(envelope).put("before", before).put("after", after)
                .put("source", source).put("op", op).put("ts_ms", millis + 500).put("ts_us", (millis + 500) * 1000)
                .put("ts_ns", (millis + 500) * 1_000_000);
        value.validate();
        return value;
    }

    static void tombstone(int id) throws Exception {
        ObjectNode out = record("debezium", id, ENVELOPE, null, encoded(KEYS, KEY, new Struct(KEY).put("id", id)));
        out.putNull("op");
        print(out);
    }

    /** Debezium (PostgreSQL) change events of one table, in the order a connector writes them: a snapshot, a
     * truncate, inserts, updates, a delete and its tombstone. */
    static void debezium() throws Exception {
        event("r", 100, 1001, null, fullRow(1, 1001));
        event("r", 101, 1002, null, fullRow(2, 1002));
        event("t", 102, null, null, null);
        for (int base = 1; base <= 5; base++) {
            event("c", 110 + base, base, null, fullRow(base, base));
        }
        event("u", 120, 3, fullRow(3, 3), fullRow(6, 3));
        event("c", 121, 6, null, fullRow(6, 6));
        event("u", 122, 4, fullRow(4, 4), fullRow(4, 4));
        event("d", 123, 6, fullRow(6, 6), null);
        tombstone(6);
    }

    public static void main(String[] args) throws Exception {
        switch (args.length == 1 ? args[0] : "") {
            case "append" -> append();
            case "debezium" -> debezium();
            default -> throw new IllegalArgumentException("usage: ConnectRecords append|debezium, not "
                    + Arrays.toString(args));
        }
        System.out.flush();
    }
}
