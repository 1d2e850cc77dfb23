package io.github.seederdgl.procedures;

import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;
import java.util.stream.IntStream;

import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Label;
import org.neo4j.graphdb.Node;
import org.neo4j.graphdb.ResourceIterator;
import org.neo4j.graphdb.Transaction;
import org.neo4j.procedure.TerminationGuard;

/**
 * The sketches of every node of a dataset side by side in flat arrays, for exact seeding.
 *
 * <p>Exact seeding bounds every node of the label. Through the store that is one node record and
 * one cache lookup per node before any arithmetic; here the bounds are one pass over a byte array,
 * split over the cores, with the sums in SIMD lanes where the server has the Vector API
 * ({@link VectorDot}; the scalar sums took ~35 ms at Prime scale, 129k nodes of 384
 * dimensions, which is what the lanes are for). An index is built on the first
 * call under a {@code sketch_version} (see {@link SketchCache}: every seeder-dgl write of sketches
 * renews it) and kept with the label's node count at that time, which the count store gives at
 * once: a node created or deleted by a write of the user's own changes the count, and the index
 * is built again. As with the sketch cache, the index only chooses whose embedding is read: each
 * chosen node is found again in the store, must still carry the label, and is scored from its
 * stored embedding.
 *
 * <p>Each index holds at most a quarter of the heap (Prime scale, 129k nodes of 384 dimensions:
 * 59 MB; MAG scale, 1.87M nodes: 0.8 GB, so a 6 GB heap); a larger dataset is seeded through the
 * store as before, and whether it fits is known from the label's count and the first sketch,
 * before the rest is read. The build reads past {@link SketchCache} and then drops that cache's
 * sketches of the label, which the index holds: the two never keep the same sketches twice.
 */
final class SeedIndex {
    /** Dimensions summed in ints before the sum moves to a long: each of the four scalar sums then
     * takes 512 products of at most 127 * 32767, under 2^31. */
    private static final int BLOCK = 2048;
    /** Below this many multiply-adds a scan stays on the calling thread. */
    private static final long PARALLEL_WORK = 4_000_000L;
    static final long BUDGET = Runtime.getRuntime().maxMemory() / 4;
    /** Whether {@link VectorDot} can run: its module is loaded and the CPU has the lanes. */
    static final boolean SIMD = simd();
    private static final ConcurrentHashMap<String, SeedIndex> INDEXES = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<String, ReentrantLock> LOCKS = new ConcurrentHashMap<>();
    /** Keys whose index is being built in the background, and when a failed build may be tried again. */
    private static final ConcurrentHashMap<String, Boolean> BUILDING = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<String, Long> RETRY_AT = new ConcurrentHashMap<>();

    private final String version;
    private final long count;
    /** The {@link Changes} counter when the label's count was last found equal to {@link #count}; -1: never. */
    private long countedAt = -1;
    /** Length of every sketch; -1 marks an index that cannot be built (too large, or sketches of
     * different lengths), remembered so that later calls under the same version do not try again. */
    final int dimension;
    /** Internal node ids, in label-scan order. */
    private final long[] nodes;
    /** Row i: the int8 codes of node i (zeros when it has no sketch). */
    private final byte[] codes;
    /** 1 / sqrt(sum of squares of the codes) of node i; 0 when it has no sketch. */
    private final double[] inverseNorm;
    /** Sketch error of node i ({@link Scoring#NO_SKETCH_ERROR} when it has none). */
    private final double[] error;
    /** Internal id to row, for K-hop, which bounds the neighbours it meets one by one. */
    private final LongIntMap rows;

    private SeedIndex(String version, long count, int dimension, long[] nodes, byte[] codes, double[] inverseNorm,
                      double[] error) {
        this.version = version;
        this.count = count;
        this.dimension = dimension;
        this.nodes = nodes;
        this.codes = codes;
        this.inverseNorm = inverseNorm;
        this.error = error;
        this.rows = new LongIntMap(nodes.length);
        for (int i = 0; i < nodes.length; i++) {
            rows.putIfAbsent(nodes[i], i);
        }
    }

    int size() {
        return nodes.length;
    }

    /**
     * The index of the label under {@code version} when the label has {@code count} nodes; null when
     * there is none to use (no version, too large, or, without {@code wait}, not built yet).
     *
     * <p>With {@code wait} (exact seeding, which scans it) a missing or stale index is built in this
     * call, and concurrent calls on the dataset wait for that one build. Without it (K-hop, which
     * only bounds neighbours from it and can read their sketches from the store instead) the call
     * never waits for a build: it gets null while one runs, and starts one in a thread of its own
     * when none is valid (MAG scale: ~30 s, against milliseconds for the query).
     */
    static SeedIndex of(GraphDatabaseService db, Label label, Scoring.Properties properties, LongSupplier count,
                        Transaction tx, TerminationGuard guard, boolean wait) {
        String version = properties.sketchVersion;
        if (version == null || version.isEmpty() || !properties.seedIndex) {
            return null;
        }
        String database = db.databaseName();
        String key = database + '\u0000' + label.name() + '\u0000' + properties.sketch + '\u0000'
                + properties.sketchError;
        // One lock per index: a build holds it, and calls on other datasets never wait for it.
        ReentrantLock lock = LOCKS.computeIfAbsent(key, k -> new ReentrantLock());
        if (wait) {
            lock.lock();
        } else if (!lock.tryLock()) {
            return null;  // being built: bound from the store this time
        }
        try {
            if (wait) {
                return ensure(key, database, version, count, label, properties, tx, guard::check);
            }
            SeedIndex index = valid(key, database, version, count);
            if (index == null) {
                buildInBackground(db, key, version, label, properties);
                return null;
            }
            return index.dimension < 0 ? null : index;  // also a dataset found too large: not tried again
        } finally {
            lock.unlock();
        }
    }

    /** The kept index when it is current (version, and node count unless nothing was written since
     * it was last counted); null otherwise. Called holding the key's lock. */
    private static SeedIndex valid(String key, String database, String version, LongSupplier count) {
        SeedIndex index = INDEXES.get(key);
        if (index == null || !version.equals(index.version)) {
            return null;
        }
        // No node or label written since the count was last taken (the database's Changes counter
        // stands where it stood then): the count cannot have moved, and is not asked again.
        AtomicLong changes = Changes.counter(database);
        long stamp = changes == null ? -1 : changes.get();
        if (stamp >= 0 && index.countedAt == stamp) {
            return index;
        }
        if (index.count != count.getAsLong()) {
            return null;
        }
        index.countedAt = stamp;
        return index;
    }

    /** {@link #valid}, else a new index built now and kept. Called holding the key's lock. */
    private static SeedIndex ensure(String key, String database, String version, LongSupplier count, Label label,
                                    Scoring.Properties properties, Transaction tx, Runnable check) {
        SeedIndex index = valid(key, database, version, count);
        if (index != null) {
            return index.dimension < 0 ? null : index;
        }
        AtomicLong changes = Changes.counter(database);
        long stamp = changes == null ? -1 : changes.get();
        long nodes = count.getAsLong();
        INDEXES.remove(key);  // the old index is not kept while the new one is built
        index = build(version, nodes, label, properties, tx, check);
        index.countedAt = stamp;
        INDEXES.put(key, index);
        if (index.dimension >= 0) {
            // The index holds the label's sketches now; the cache's copies of them would only
            // take the heap twice (K-hop bounds every node the index has from the index).
            SketchCache.drop(database, label.name(), properties.sketch);
        }
        return index.dimension < 0 ? null : index;
    }

    /** Builds the index in a daemon thread, in a transaction of its own, unless one is building. */
    private static void buildInBackground(GraphDatabaseService db, String key, String version, Label label,
                                          Scoring.Properties properties) {
        Long retry = RETRY_AT.get(key);
        if ((retry != null && System.nanoTime() - retry < 0) || BUILDING.putIfAbsent(key, Boolean.TRUE) != null) {
            return;
        }
        Thread builder = new Thread(() -> {
            ReentrantLock lock = LOCKS.computeIfAbsent(key, k -> new ReentrantLock());
            lock.lock();
            try (Transaction tx = db.beginTx()) {
                ensure(key, db.databaseName(), version, () -> labelCount(tx, label), label, properties, tx,
                        () -> { });
            } catch (RuntimeException | OutOfMemoryError failed) {
                // The database stopped, or the heap could not hold it: K-hop bounds from the store,
                // and the next build is tried a minute later.
                RETRY_AT.put(key, System.nanoTime() + 60_000_000_000L);
            } finally {
                lock.unlock();
                BUILDING.remove(key);
            }
        }, "seeder-dgl seed index " + label.name());
        builder.setDaemon(true);
        builder.start();
    }

    /** Nodes with the label now, from the count store. */
    static long labelCount(Transaction tx, Label label) {
        String query = "MATCH (n:`" + label.name().replace("`", "``") + "`) RETURN count(n) AS count";
        try (var result = tx.execute(query)) {
            return ((Number) result.next().get("count")).longValue();
        }
    }

    private static SeedIndex build(String version, long count, Label label, Scoring.Properties properties,
                                   Transaction tx, Runnable check) {
        // Rows for the label's count now, grown if nodes are added while the scan runs. The sketches
        // are read past the sketch cache: the index is where they are kept from now on.
        int capacity = (int) Math.min(Math.max(count, 16L), Integer.MAX_VALUE - 16L);
        long[] nodes = new long[capacity];
        double[] inverseNorm = new double[capacity];
        double[] error = new double[capacity];
        byte[] codes = null;  // allocated at the first sketch, when its length is known
        int dimension = -1;
        int n = 0;
        try (ResourceIterator<Node> found = tx.findNodes(label)) {
            while (found.hasNext()) {
                check.run();
                Node node = found.next();
                SketchCache.Sketch sketch = Scoring.sketchOf(node, properties, null);
                byte[] c = sketch.codes();
                if (c != null && dimension < 0) {
                    dimension = c.length;
                    if (bytes(capacity, dimension) > BUDGET || (long) capacity * dimension > Integer.MAX_VALUE - 16) {
                        return unusable(version, count);  // known before the rest is read
                    }
                    codes = new byte[capacity * dimension];
                } else if (c != null && c.length != dimension) {
                    return unusable(version, count);  // the store path reports the mismatch
                }
                if (n == capacity) {
                    long grown = Math.min((long) capacity + (capacity >> 1) + 16, Integer.MAX_VALUE - 16L);
                    if (grown == capacity || bytes(grown, Math.max(dimension, 0)) > BUDGET
                            || grown * Math.max(dimension, 0) > Integer.MAX_VALUE - 16) {
                        return unusable(version, count);
                    }
                    capacity = (int) grown;
                    nodes = Arrays.copyOf(nodes, capacity);
                    inverseNorm = Arrays.copyOf(inverseNorm, capacity);
                    error = Arrays.copyOf(error, capacity);
                    if (codes != null) {
                        codes = Arrays.copyOf(codes, capacity * dimension);
                    }
                }
                nodes[n] = Scoring.nodeKey(node);
                if (c == null) {
                    error[n] = Scoring.NO_SKETCH_ERROR;
                } else {
                    System.arraycopy(c, 0, codes, n * dimension, dimension);
                    inverseNorm[n] = 1.0 / Math.sqrt(sketch.squares());
                    error[n] = sketch.error();
                }
                n++;
            }
        }
        // The codes array keeps its length (rows past n are never read); the small ones are trimmed.
        return new SeedIndex(version, count, Math.max(dimension, 0), Arrays.copyOf(nodes, n),
                codes == null ? new byte[0] : codes, Arrays.copyOf(inverseNorm, n), Arrays.copyOf(error, n));
    }

    /** Heap taken by an index of {@code rows} sketches of {@code dimension} codes: the codes, the
     * id, norm and error of each row, and the id-to-row map (two to four slots of 12 bytes a row). */
    static long bytes(long rows, int dimension) {
        return rows * (dimension + 24L + 48L);
    }

    /** Remembered under the version and count, so that the next call does not try again. */
    private static SeedIndex unusable(String version, long count) {
        return new SeedIndex(version, count, -1, new long[0], new byte[0], new double[0], new double[0]);
    }

    /** The row of the node with this internal id; {@link LongIntMap#ABSENT} when it is not in the index. */
    int row(long internalId) {
        return rows.get(internalId);
    }

    /**
     * {low, high} around sim(q, node of {@code row}), as {@link Scoring#bound} gives them from the
     * same sketch: the same integer sum, scaled by the inverse norm instead of divided by the norm
     * (a last-bit difference, inside the bound's rounding margin).
     */
    void bound(int row, Scoring scoring, boolean simd, double[] out) {
        double approx = 0.0;
        double width = Scoring.NO_SKETCH_ERROR;
        if (inverseNorm[row] != 0.0) {
            approx = scoring.codeScale() * dot(scoring.queryCodes(), row * dimension, simd) * inverseNorm[row];
            width = error[row] + scoring.codeError();
        }
        out[0] = approx - width;
        out[1] = approx + width;
    }

    /** Internal id of node {@code i}. */
    long node(int i) {
        return nodes[i];
    }

    /**
     * The approximate cosine of every node with the query (from its codes) into {@code approx},
     * and its half-width (sketch error plus the query's rounding) into {@code width}.
     */
    void bounds(Scoring scoring, boolean simd, double[] approx, double[] width) {
        int n = nodes.length;
        if (n == 0) {
            return;
        }
        if (dimension > 0) {
            scoring.checkDimension(dimension);
        }
        int[] query = scoring.queryCodes();
        double scale = scoring.codeScale();
        double rounding = scoring.codeError();
        int chunks = (long) n * dimension < PARALLEL_WORK ? 1
                : Math.min(Runtime.getRuntime().availableProcessors(), 8);
        int step = (n + chunks - 1) / chunks;
        IntStream range = IntStream.range(0, chunks);
        (chunks > 1 ? range.parallel() : range).forEach(chunk -> {
            int stop = Math.min(n, (chunk + 1) * step);
            for (int i = chunk * step; i < stop; i++) {
                if (inverseNorm[i] == 0.0) {
                    approx[i] = 0.0;
                } else {
                    approx[i] = scale * dot(query, i * dimension, simd) * inverseNorm[i];
                }
                width[i] = error[i] + rounding;
            }
        });
    }

    private static boolean simd() {
        if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) {
            return false;  // VectorDot is never loaded: its classes would not resolve
        }
        try {
            return VectorDot.usable();
        } catch (LinkageError | RuntimeException unavailable) {
            return false;
        }
    }

    /** The integer dot product of the query codes with row {@code offset} of the codes: in SIMD
     * lanes where the JVM has them, else in four independent scalar sums (so that each addition
     * does not wait for the one before). */
    private long dot(int[] query, int offset, boolean simd) {
        if (simd && SIMD) {
            return VectorDot.dot(codes, offset, query, dimension);
        }
        long total = 0;
        for (int start = 0; start < dimension; start += BLOCK) {
            int stop = Math.min(dimension, start + BLOCK);
            int a = 0;
            int b = 0;
            int c = 0;
            int e = 0;
            int i = start;
            for (; i + 3 < stop; i += 4) {
                a += codes[offset + i] * query[i];
                b += codes[offset + i + 1] * query[i + 1];
                c += codes[offset + i + 2] * query[i + 2];
                e += codes[offset + i + 3] * query[i + 3];
            }
            for (; i < stop; i++) {
                a += codes[offset + i] * query[i];
            }
            total += (long) a + b + c + e;
        }
        return total;
    }
}
