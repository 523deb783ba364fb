/*
 * A Java job behind the restore proof of savepoints statekit bootstrapped
 * (tests/flink/test_flink_write_restore.py). Compiled with javac 17 against the jars of the
 * PyFlink virtualenv (pyflink/lib), run on Flink's MiniCluster; one JVM runs every job of a plan:
 *
 *     java -cp 'CLASSES:pyflink/lib/*' FlinkStatekitCheck PLAN
 *
 * PLAN is a text file, one job per line:  SAVEPOINT_URI RESULT_FILE STATUS_FILE PARALLELISM BACKEND KEYS
 *
 * Each job restores two operators and writes one JSON object per line to RESULT_FILE, then
 * "done" (or "failed" and the error) to STATUS_FILE:
 *   "java"     keyed by String "key-<i>", max parallelism 256: ValueState<Long> count,
 *              ListState<Integer> seen, MapState<String, Long> buckets, ReducingState<Long> total
 *              (sum), ValueState<Row(tag String, n Integer)> pair, and event-time timers;
 *   "java-row" keyed by Row(name String, n Integer) = ("k", i), max parallelism 128: ValueState<String> label.
 * A bounded source sends every key once; the operator emits the state it finds; the end of
 * input fires the restored timers.
 */

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

public class FlinkStatekitCheck {

    static final TypeInformation<Row> PAIR = Types.ROW_NAMED(new String[] {"tag", "n"}, Types.STRING, Types.INT);
    static final TypeInformation<Row> ROW_KEY = Types.ROW_NAMED(new String[] {"name", "n"}, Types.STRING, Types.INT);

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof String) {
            return quote((String) value);
        }
        if (value instanceof Row) {
            Row row = (Row) value;
            return "{\"tag\": " + json(row.getField(0)) + ", \"n\": " + json(row.getField(1)) + "}";
        }
        return value.toString();
    }

    public static class Profile extends KeyedProcessFunction<String, String, String> {
        transient ValueState<Long> count;
        transient ListState<Integer> seen;
        transient MapState<String, Long> buckets;
        transient ReducingState<Long> total;
        transient ValueState<Row> pair;

        @Override
        public void open(OpenContext context) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            seen = getRuntimeContext().getListState(new ListStateDescriptor<>("seen", Types.INT));
            buckets = getRuntimeContext().getMapState(new MapStateDescriptor<>("buckets", Types.STRING, Types.LONG));
            total = getRuntimeContext().getReducingState(new ReducingStateDescriptor<>("total", Long::sum, Types.LONG));
            pair = getRuntimeContext().getState(new ValueStateDescriptor<>("pair", PAIR));
        }

        @Override
        public void processElement(String key, Context ctx, Collector<String> out) throws Exception {
            List<String> elements = new ArrayList<>();
            Iterable<Integer> found = seen.get();
            if (found != null) {
                for (Integer n : found) {
                    elements.add(String.valueOf(n));
                }
            }
            List<String> entries = new ArrayList<>();
            for (Map.Entry<String, Long> e : buckets.entries()) {
                entries.add(quote(e.getKey()) + ": " + e.getValue());
            }
            entries.sort(null);
            out.collect("{\"op\": \"java\", \"key\": " + quote(key) + ", \"count\": " + json(count.value())
                    + ", \"seen\": [" + String.join(", ", elements) + "], \"buckets\": {" + String.join(", ", entries)
                    + "}, \"total\": " + json(total.get()) + ", \"pair\": " + json(pair.value()) + "}");
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) {
            out.collect("{\"op\": \"java\", \"timer\": " + quote(ctx.getCurrentKey()) + ", \"timestamp\": " + timestamp + "}");
        }
    }

    public static class Labels extends KeyedProcessFunction<Row, Row, String> {
        transient ValueState<String> label;

        @Override
        public void open(OpenContext context) {
            label = getRuntimeContext().getState(new ValueStateDescriptor<>("label", Types.STRING));
        }

        @Override
        public void processElement(Row key, Context ctx, Collector<String> out) throws Exception {
            out.collect("{\"op\": \"java-row\", \"key\": " + json(key.getField(1)) + ", \"label\": "
                    + json(label.value()) + "}");
        }
    }

    static void run(String savepoint, String result, int parallelism, String backend, int keys) throws Exception {
        Map<String, String> settings = new HashMap<>();
        settings.put("execution.state-recovery.path", savepoint);
        settings.put("execution.state-recovery.ignore-unclaimed-state", "true");
        settings.put("state.backend.type", backend);
        settings.put("rest.bind-address", "127.0.0.1");
        settings.put("taskmanager.numberOfTaskSlots", "4");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(settings));
        List<String> names = new ArrayList<>();
        List<Row> rows = new ArrayList<>();
        for (int i = 0; i < keys; i++) {
            names.add("key-" + i);
            rows.add(Row.of("k", i));
        }
        DataStream<String> profile = env.fromData(names, Types.STRING)
                .keyBy(k -> k, Types.STRING)
                .process(new Profile(), Types.STRING).uid("java").setParallelism(parallelism).setMaxParallelism(256);
        DataStream<String> labels = env.fromData(rows, ROW_KEY)
                .keyBy(r -> r, ROW_KEY)
                .process(new Labels(), Types.STRING).uid("java-row").setParallelism(parallelism).setMaxParallelism(128);
        List<String> lines = new ArrayList<>();
        try (CloseableIterator<String> it = profile.union(labels).executeAndCollect("statekit-java-read")) {
            while (it.hasNext()) {
                lines.add(it.next());
            }
        }
        Files.write(Paths.get(result), lines, StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
            if (line.isBlank()) {
                continue;
            }
            String[] job = line.trim().split(" ");
            String status;
            try {
                run(job[0], job[1], Integer.parseInt(job[3]), job[4], Integer.parseInt(job[5]));
                status = "done";
            } catch (Exception e) {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                status = "failed\n" + trace;
            }
            Files.write(Paths.get(job[2]), status.getBytes(StandardCharsets.UTF_8));
        }
        System.exit(0);
    }
}
