/*
 * Java DataStream jobs behind the golden fixtures of tests/golden/flink-java-2.3 (run by
 * scripts/gen_flink_java_fixtures.py, compiled against the jars PyFlink bundles) and the
 * restore proof of scripts/test_flink.sh (mode "restore").
 *
 *   java FixtureJobs write OUT                    every fixture job, one after the other
 *   java FixtureJobs restore RESULT SP:M[:fail]...  the "tuple" job restored from each savepoint
 *
 * Each "write" job reads numbers 0.. (NumberSequenceSource, endless, throttled once N records
 * are out), keeps the first N, keys them and updates its state; once every keyed record is
 * processed the state is frozen and the main thread takes the savepoints, then cancels the
 * job. What every state holds is a function of N (scripts/gen_flink_java_fixtures.py computes
 * it in Python for expected.json).
 */

import java.io.File;
import java.io.PrintWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.tuple.Tuple5;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;

public class FixtureJobs {

    static final int MAX_PARALLELISM = 128;
    static final long FAR_FUTURE = 4102444800000L;
    static final AtomicLong PROCESSED = new AtomicLong();
    static final ConcurrentLinkedQueue<String> RESTORED = new ConcurrentLinkedQueue<>();

    // ------------------------------------------------------------------ types

    /** A POJO key: Flink's PojoSerializer, hashCode of the class (user code). */
    public static class Account {
        public String region;
        public int id;

        public Account() {}

        public Account(String region, int id) {
            this.region = region;
            this.id = id;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Account && ((Account) o).id == id && Objects.equals(((Account) o).region, region);
        }

        @Override
        public int hashCode() {
            return Objects.hash(region, id);
        }
    }

    public static class Profile {
        public String name;
        public long total;
        public int count;
        public Double last;  // null for every fourth record
        public boolean even;
        public Account home;  // a nested POJO
    }

    public static class Shape {
        public String name;
    }

    /** Registered (pipeline.serialization-config): a tagged subclass in the POJO snapshot. */
    public static class Circle extends Shape {
        public double radius;
    }

    /** Registered too (a second tag). */
    public static class Square extends Shape {
        public int side;
    }

    public enum Color { RED, GREEN, BLUE }

    /** No default constructor: a generic type, serialized by Kryo; registered with Kryo. */
    public static class Reading {
        private final String sensor;
        private final int count;
        private final long total;

        public Reading(String sensor, int count, long total) {
            this.sensor = sensor;
            this.count = count;
            this.total = total;
        }
    }

    /** Also Kryo, but not registered: Kryo writes its class name. */
    public static class Note {
        private final String text;

        public Note(String text) {
            this.text = text;
        }
    }

    // ------------------------------------------------------------------ jobs

    static Configuration configuration(String out, String backend, boolean compressed) {
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", backend);
        conf.setString("execution.checkpointing.dir", "file://" + out + "/checkpoints");
        conf.setString("execution.checkpointing.savepoint-dir", "file://" + out + "/savepoints");
        conf.setString("execution.checkpointing.interval", "1 s");
        conf.setString("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.setString("execution.checkpointing.num-retained", "1");
        conf.setString("execution.checkpointing.snapshot-compression", String.valueOf(compressed));
        conf.setString("execution.checkpointing.incremental", "false");
        conf.setString("taskmanager.numberOfTaskSlots", "4");
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("pipeline.serialization-config",
                "[FixtureJobs$Circle: {type: pojo}, FixtureJobs$Square: {type: pojo}, FixtureJobs$Reading: {type: kryo}]");
        return conf;
    }

    static StreamExecutionEnvironment environment(Configuration conf) {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setMaxParallelism(MAX_PARALLELISM);
        return env;
    }

    /** Numbers 0..n-1, then the endless rest of the sequence held back (and dropped). */
    static DataStream<Long> firstN(StreamExecutionEnvironment env, long n) {
        return env.fromSource(new NumberSequenceSource(0, Long.MAX_VALUE), WatermarkStrategy.noWatermarks(), "numbers")
                .setParallelism(1).uid("numbers")
                .map(x -> {
                    if (x >= n) {
                        Thread.sleep(5);
                    }
                    return x;
                }).returns(Types.LONG).setParallelism(1).uid("throttle")
                .filter(x -> x < n).setParallelism(1).uid("first-n");
    }

    static class PojoState extends KeyedProcessFunction<Account, Long, Long> {
        transient ValueState<Profile> profile;
        transient ListState<Long> recent;
        transient MapState<String, Account> pets;
        transient ValueState<Shape> shape;

        @Override
        public void open(OpenContext ctx) {
            profile = getRuntimeContext().getState(new ValueStateDescriptor<>("profile", Profile.class));
            recent = getRuntimeContext().getListState(new ListStateDescriptor<>("recent", Types.LONG));
            pets = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("pets", Types.STRING, TypeInformation.of(Account.class)));
            shape = getRuntimeContext().getState(new ValueStateDescriptor<>("shape", Shape.class));
        }

        @Override
        public void processElement(Long n, Context ctx, Collector<Long> out) throws Exception {
            Account key = ctx.getCurrentKey();
            Profile p = profile.value();
            if (p == null) {
                p = new Profile();
                p.name = "user-" + key.id;
                p.home = new Account("h" + key.id % 2, key.id);
            }
            p.total += n;
            p.count += 1;
            p.last = n % 4 == 0 ? null : n / 4.0;
            p.even = n % 2 == 0;
            profile.update(p);
            recent.add(n);
            pets.put("p" + n % 3, new Account("m" + n, n.intValue()));
            Shape s;
            if (n % 3 == 0) {
                s = new Shape();
            } else if (n % 3 == 1) {
                Circle c = new Circle();
                c.radius = n / 2.0;
                s = c;
            } else {
                Square q = new Square();
                q.side = n.intValue();
                s = q;
            }
            s.name = "s" + n;
            shape.update(s);
            PROCESSED.incrementAndGet();
        }
    }

    static class TupleState extends KeyedProcessFunction<Tuple2<String, Integer>, Long, Long> {
        transient ValueState<Tuple3<Long, String, Double>> stats;
        transient ListState<Tuple2<Integer, Long>> history;
        transient MapState<String, Tuple2<Long, Boolean>> buckets;
        transient ValueState<Tuple5<Color, LocalDateTime, Instant, BigDecimal, Timestamp>> misc;
        transient ValueState<Either<String, Long>> choice;
        final boolean restoring;

        TupleState(boolean restoring) {
            this.restoring = restoring;
        }

        @Override
        public void open(OpenContext ctx) {
            stats = getRuntimeContext().getState(new ValueStateDescriptor<>("stats",
                    new TypeHint<Tuple3<Long, String, Double>>() {}.getTypeInfo()));
            history = getRuntimeContext().getListState(new ListStateDescriptor<>("history",
                    new TypeHint<Tuple2<Integer, Long>>() {}.getTypeInfo()));
            buckets = getRuntimeContext().getMapState(new MapStateDescriptor<>("buckets", Types.STRING,
                    new TypeHint<Tuple2<Long, Boolean>>() {}.getTypeInfo()));
            misc = getRuntimeContext().getState(new ValueStateDescriptor<>("misc",
                    new TypeHint<Tuple5<Color, LocalDateTime, Instant, BigDecimal, Timestamp>>() {}.getTypeInfo()));
            choice = getRuntimeContext().getState(new ValueStateDescriptor<>("choice",
                    new TypeHint<Either<String, Long>>() {}.getTypeInfo()));
        }

        @Override
        public void processElement(Long n, Context ctx, Collector<Long> out) throws Exception {
            if (restoring) {
                report(ctx.getCurrentKey());
                return;
            }
            Tuple3<Long, String, Double> s = stats.value();
            long count = s == null ? 1 : s.f0 + 1;
            stats.update(Tuple3.of(count, "last-" + n, n * 0.5));
            history.add(Tuple2.of(n.intValue(), n * n));
            String bucket = "b" + n % 3;
            Tuple2<Long, Boolean> b = buckets.get(bucket);
            buckets.put(bucket, Tuple2.of((b == null ? 0 : b.f0) + n, n % 2 == 0));
            misc.update(Tuple5.of(Color.values()[(int) (n % 3)],
                    LocalDateTime.of(2024, 1, 1, 0, 0).plusMinutes(n),
                    Instant.ofEpochMilli(1700000000000L + n * 1000), BigDecimal.valueOf(n, 2),
                    new Timestamp(1700000000000L + n)));
            choice.update(n % 2 == 0 ? Either.Left("e" + n) : Either.Right(n));
            ctx.timerService().registerEventTimeTimer(FAR_FUTURE + Integer.parseInt(ctx.getCurrentKey().f0.substring(1)));
            PROCESSED.incrementAndGet();
        }

        void report(Tuple2<String, Integer> key) throws Exception {
            Tuple3<Long, String, Double> s = stats.value();
            StringBuilder line = new StringBuilder();
            line.append("{\"key\": [\"").append(key.f0).append("\", ").append(key.f1).append("]");
            line.append(", \"count\": ").append(s == null ? "null" : s.f0);
            line.append(", \"last\": ").append(s == null ? "null" : "\"" + s.f1 + "\"");
            List<String> seen = new ArrayList<>();
            Iterable<Tuple2<Integer, Long>> all = history.get();
            if (all != null) {
                for (Tuple2<Integer, Long> h : all) {
                    seen.add(String.valueOf(h.f0));
                }
            }
            line.append(", \"history\": [").append(String.join(", ", seen)).append("]");
            List<String> sums = new ArrayList<>();
            for (String bucket : new String[] {"b0", "b1", "b2"}) {
                Tuple2<Long, Boolean> b = buckets.get(bucket);
                if (b != null) {
                    sums.add("\"" + bucket + "\": " + b.f0);
                }
            }
            line.append(", \"buckets\": {").append(String.join(", ", sums)).append("}");
            Either<String, Long> c = choice.value();
            line.append(", \"choice\": ").append(c == null ? "null" : c.isLeft() ? "\"" + c.left() + "\"" : c.right());
            line.append("}");
            RESTORED.add(line.toString());
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<Long> out) {
            RESTORED.add("{\"timer\": [\"" + ctx.getCurrentKey().f0 + "\", " + ctx.getCurrentKey().f1
                    + "], \"timestamp\": " + timestamp + "}");
        }
    }

    static class KryoState extends KeyedProcessFunction<String, Long, Long> {
        transient ValueState<Reading> reading;
        transient ValueState<Object> anything;
        transient ValueState<UUID> token;
        transient ValueState<Note> note;

        @Override
        public void open(OpenContext ctx) {
            reading = getRuntimeContext().getState(new ValueStateDescriptor<>("reading", Reading.class));
            anything = getRuntimeContext().getState(new ValueStateDescriptor<>("anything", Types.GENERIC(Object.class)));
            token = getRuntimeContext().getState(new ValueStateDescriptor<>("token", UUID.class));
            note = getRuntimeContext().getState(new ValueStateDescriptor<>("note", Note.class));
        }

        @Override
        public void processElement(Long n, Context ctx, Collector<Long> out) throws Exception {
            Reading r = reading.value();
            reading.update(new Reading(ctx.getCurrentKey(), r == null ? 1 : r.count + 1, (r == null ? 0 : r.total) + n));
            Object a = n % 3 == 0 ? Integer.valueOf(n.intValue()) : n % 3 == 1 ? "v" + n : (Object) n;
            anything.update(a);
            token.update(new UUID(n, n * 31));
            note.update(new Note("note" + n));
            PROCESSED.incrementAndGet();
        }
    }

    static class LineCount extends KeyedProcessFunction<String, String, Long> {
        transient ValueState<Long> lines;
        transient ValueState<Long> last;

        @Override
        public void open(OpenContext ctx) {
            lines = getRuntimeContext().getState(new ValueStateDescriptor<>("lines", Types.LONG));
            last = getRuntimeContext().getState(new ValueStateDescriptor<>("last", Types.LONG));
        }

        @Override
        public void processElement(String line, Context ctx, Collector<Long> out) throws Exception {
            Long seen = lines.value();
            lines.update(seen == null ? 1 : seen + 1);
            last.update(Long.parseLong(line));
            PROCESSED.incrementAndGet();
        }
    }

    // ------------------------------------------------------------------ running

    interface Build {
        void build(StreamExecutionEnvironment env);
    }

    /** Runs one job until {@code expected} records were processed, takes the savepoints, cancels it. */
    static void freezeAndSave(String name, String out, String backend, boolean compressed, long expected,
                              Build build, PrintWriter facts) throws Exception {
        PROCESSED.set(0);
        StreamExecutionEnvironment env = environment(configuration(out, backend, compressed));
        build.build(env);
        JobClient client = env.executeAsync(name);
        long deadline = System.currentTimeMillis() + 300_000;
        while (PROCESSED.get() < expected) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException(name + ": only " + PROCESSED.get() + " of " + expected + " records");
            }
            Thread.sleep(50);
        }
        Thread.sleep(2500);  // at least one checkpoint of the frozen state completes (interval 1 s)
        String savepoint = client.triggerSavepoint("file://" + out + "/savepoints", SavepointFormatType.CANONICAL).get();
        client.cancel().get();
        Thread.sleep(500);
        facts.println("{\"job\": \"" + name + "\", \"job_id\": \"" + client.getJobID() + "\", \"savepoint\": \""
                + savepoint + "\", \"out\": \"" + out + "\"}");
        facts.flush();
    }

    /** Runs the file job until {@code expected} lines were processed, then saves mid-file. */
    static void fileJob(String out, PrintWriter facts) throws Exception {
        new File(out).mkdirs();
        File input = new File(out, "input.txt");
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < 200_000; i++) {
            text.append(i).append('\n');
        }
        Files.write(input.toPath(), text.toString().getBytes(StandardCharsets.UTF_8));
        PROCESSED.set(0);
        StreamExecutionEnvironment env = environment(configuration(out, "hashmap", false));
        FileSource<String> source = FileSource.forRecordStreamFormat(new TextLineInputFormat(),
                new Path("file://" + input.getAbsolutePath())).build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "lines").setParallelism(1).uid("lines")
                .map(line -> {
                    Thread.sleep(2);
                    return line;
                }).returns(Types.STRING).setParallelism(1).uid("slow")
                .keyBy(line -> "k" + Long.parseLong(line) % 20, Types.STRING)
                .process(new LineCount()).setParallelism(2).uid("count").returns(Types.LONG);
        JobClient client = env.executeAsync("files");
        while (PROCESSED.get() < 1000) {
            Thread.sleep(50);
        }
        String savepoint = client.triggerSavepoint("file://" + out + "/savepoints", SavepointFormatType.CANONICAL).get();
        client.cancel().get();
        Thread.sleep(500);
        facts.println("{\"job\": \"files\", \"job_id\": \"" + client.getJobID() + "\", \"savepoint\": \""
                + savepoint + "\", \"out\": \"" + out + "\", \"input\": \"" + input.getAbsolutePath() + "\"}");
        facts.flush();
    }

    static final int POJO_N = 600;
    static final int TUPLE_N = 600;
    static final int KRYO_N = 300;

    static void buildPojo(StreamExecutionEnvironment env) {
        firstN(env, POJO_N)
                .keyBy((KeySelector<Long, Account>) n -> new Account("r" + (n % 30) % 3, (int) (n % 30)),
                        TypeInformation.of(Account.class))
                .process(new PojoState()).setParallelism(2).uid("pojo-state").returns(Types.LONG);
    }

    static KeySelector<Long, Tuple2<String, Integer>> tupleKey() {
        return n -> Tuple2.of("k" + n % 40, (int) (n % 40 % 7));
    }

    static void buildTuple(StreamExecutionEnvironment env) {
        firstN(env, TUPLE_N)
                .keyBy(tupleKey(), new TypeHint<Tuple2<String, Integer>>() {}.getTypeInfo())
                .process(new TupleState(false)).setParallelism(2).uid("tuple-state").returns(Types.LONG);
    }

    static void buildKryo(StreamExecutionEnvironment env) {
        firstN(env, KRYO_N)
                .keyBy(n -> "k" + n % 30, Types.STRING)
                .process(new KryoState()).setParallelism(2).uid("kryo-state").returns(Types.LONG);
    }

    /** Every fixture job, or those named in {@code only}. */
    static void write(String root, List<String> only) throws Exception {
        try (PrintWriter facts = new PrintWriter(new File(root, "facts.jsonl"), StandardCharsets.UTF_8)) {
            if (only.isEmpty() || only.contains("pojo")) {
                freezeAndSave("pojo", root + "/pojo", "hashmap", false, POJO_N, FixtureJobs::buildPojo, facts);
            }
            if (only.isEmpty() || only.contains("tuple")) {
                freezeAndSave("tuple", root + "/tuple", "hashmap", false, TUPLE_N, FixtureJobs::buildTuple, facts);
            }
            if (only.isEmpty() || only.contains("tuple-compressed")) {
                freezeAndSave("tuple-compressed", root + "/tuple-compressed", "hashmap", true, TUPLE_N,
                        FixtureJobs::buildTuple, facts);
            }
            if (only.isEmpty() || only.contains("tuple-compressed-rocksdb")) {
                freezeAndSave("tuple-compressed-rocksdb", root + "/tuple-compressed-rocksdb", "rocksdb", true,
                        TUPLE_N, FixtureJobs::buildTuple, facts);
            }
            if (only.isEmpty() || only.contains("kryo")) {
                freezeAndSave("kryo", root + "/kryo", "hashmap", false, KRYO_N, FixtureJobs::buildKryo, facts);
            }
            if (only.isEmpty() || only.contains("files")) {
                fileJob(root + "/files", facts);
            }
        }
    }

    /**
     * Restores the tuple job from each savepoint at its max parallelism (parallelism 3), sends
     * every key once and writes what the job finds to RESULT/&lt;i&gt;.jsonl; the end of input fires
     * the restored event-time timers. A restore that fails writes RESULT/&lt;i&gt;.error.
     */
    static void restore(String result, String[] savepoints) throws Exception {
        for (int i = 0; i < savepoints.length; i++) {
            String[] parts = savepoints[i].split("::");
            RESTORED.clear();
            Configuration conf = configuration(result + "/work-" + i, "hashmap", false);
            conf.setString("execution.state-recovery.path", parts[0]);
            conf.setString("execution.state-recovery.ignore-unclaimed-state", "true");
            conf.setString("execution.checkpointing.interval", "1 h");
            StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
            env.setMaxParallelism(Integer.parseInt(parts[1]));
            // every key once from a new (bounded) source; the writer's source state is left unclaimed
            DataStream<Long> numbers = env.fromSource(new NumberSequenceSource(0, 39), WatermarkStrategy.noWatermarks(),
                    "keys").setParallelism(1).uid("restore-keys");
            numbers.keyBy(tupleKey(), new TypeHint<Tuple2<String, Integer>>() {}.getTypeInfo())
                    .process(new TupleState(true)).setParallelism(3).uid("tuple-state").returns(Types.LONG);
            File target = new File(result, i + ".jsonl");
            try {
                env.execute("restore-" + i);
                Files.write(target.toPath(), String.join("\n", RESTORED).getBytes(StandardCharsets.UTF_8));
            } catch (Exception e) {
                Throwable root = e;
                StringBuilder causes = new StringBuilder();
                while (root != null) {
                    causes.append(root).append('\n');
                    root = root.getCause();
                }
                Files.write(new File(result, i + ".error").toPath(), causes.toString().getBytes(StandardCharsets.UTF_8));
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length >= 2 && args[0].equals("write")) {
            write(args[1], java.util.Arrays.asList(args).subList(2, args.length));
        } else if (args.length >= 3 && args[0].equals("restore")) {
            String[] savepoints = new String[args.length - 2];
            System.arraycopy(args, 2, savepoints, 0, savepoints.length);
            restore(args[1], savepoints);
        } else {
            System.err.println("usage: FixtureJobs write OUT | restore RESULT SAVEPOINT::MAXPAR...");
            System.exit(2);
        }
        System.exit(0);
    }
}
