package io.github.seederdgl.procedures;

import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
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
 * 65 MB; MAG scale, 1.87M nodes: 0.9 GB, so a 6 GB heap); a larger dataset is seeded through the
 * store as before, and whether it fits is known from the label's count and the first sketch,
 * before the rest is read. The build reads past {@link SketchCache} and then drops that cache's
 * sketches of the label, which the index holds: the two never keep the same sketches twice.
 *
 * <p>Past a few hundred thousand nodes the exact scan is bound by memory bandwidth (MAG scale:
 * 720 MB of codes a question, ~60 ms). With config {@code candidates}, {@link #preselect} narrows
 * it first: every row also keeps one bit a dimension (its unit sketch above or below the dataset's
 * mean there), 48 bytes at 384 dimensions. A Hamming scan of those bits against the query's signs
 * keeps the {@code 10 * keep} nearest rows, the query rounded to 16 levels a dimension scores those
 * against the same bits and keeps {@code keep}, and only those are bounded by their codes and
 * scored exactly. Nodes the two estimates leave out are the price: on random 384-dimensional
 * vectors (the synthetic MAG-scale graph, the hardest case: no cluster stands out) 10,000 of 1.87M
 * rows held the exact top 3 for 0.990 of them (benchmarks/README.md).
 */
final class SeedIndex {
    /** Dimensions summed in ints before the sum moves to a long: each of the four scalar sums then
     * takes 512 products of at most 127 * 32767, under 2^31. */
    private static final int BLOCK = 2048;
    /** Below this many multiply-adds a scan stays on the calling thread. */
    private static final long PARALLEL_WORK = 4_000_000L;
    /** Fixed ranges the mean of the sketches is summed in (see {@link #signs}). */
    private static final int MEAN_RANGES = 8;
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
    /** Arrays of one entry a row that exact seeding borrows and gives back: allocated anew in every
     * call, they cost more than the scan's arithmetic at MAG scale (~13 ms for 15 MB: at that size
     * the JVM's collector allocates each outside its fast path). At most {@link #POOLED} are kept
     * (two calls' worth); more concurrent calls allocate their own. */
    private final ConcurrentLinkedQueue<double[]> rowValues = new ConcurrentLinkedQueue<>();
    private final AtomicInteger pooled = new AtomicInteger();
    private static final int POOLED = 4;
    /** Rows without a sketch, ascending: {@link #preselect} always keeps them (no bound, no estimate). */
    private final int[] unsketched;
    /** 64-bit words of one row's {@link #signs}. */
    private final int words;
    /** Row i, {@link #words} longs: bit j set when node i's unit sketch is above the dataset's mean in
     * dimension j (all zero when it has no sketch). Centring first spreads the bits: embeddings
     * share a direction, and uncentred bits would mostly agree between any two nodes. */
    private final long[] signs;

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
        this.unsketched = IntStream.range(0, nodes.length).filter(i -> inverseNorm[i] == 0.0).toArray();
        this.words = (Math.max(dimension, 0) + 63) / 64;
        this.signs = dimension > 0 ? signs(codes, inverseNorm, nodes.length, dimension, words) : new long[0];
    }

    /** Chunks a scan of {@code work} multiply-adds is split into: one below {@link #PARALLEL_WORK}. */
    private static int chunks(long work) {
        return work < PARALLEL_WORK ? 1 : Math.min(Runtime.getRuntime().availableProcessors(), 8);
    }

    /** Runs {@code body(chunk, start, stop)} over [0, n) in {@code chunks} contiguous ranges, in parallel
     * when there are several. */
    static void split(int n, int chunks, RangeBody body) {
        int step = (n + chunks - 1) / chunks;
        IntStream range = IntStream.range(0, chunks);
        (chunks > 1 ? range.parallel() : range).forEach(
                chunk -> body.run(chunk, Math.min(n, chunk * step), Math.min(n, (chunk + 1) * step)));
    }

    @FunctionalInterface
    interface RangeBody {
        void run(int chunk, int start, int stop);
    }

    /** The sign bits of every row against the mean of the unit sketches (summed in eight fixed ranges,
     * then in range order, so the same rows give the same bits on any number of cores). */
    private static long[] signs(byte[] codes, double[] inverseNorm, int n, int dimension, int words) {
        int chunks = MEAN_RANGES;
        double[][] partial = new double[chunks][dimension];
        int[] sketched = new int[chunks];
        split(n, chunks, (chunk, start, stop) -> {
            double[] sum = partial[chunk];
            for (int i = start; i < stop; i++) {
                if (inverseNorm[i] != 0.0) {
                    sketched[chunk]++;
                    for (int j = 0, o = i * dimension; j < dimension; j++) {
                        sum[j] += codes[o + j] * inverseNorm[i];
                    }
                }
            }
        });
        double[] mean = new double[dimension];
        int count = 0;
        for (int c = 0; c < chunks; c++) {
            count += sketched[c];
            for (int j = 0; j < dimension; j++) {
                mean[j] += partial[c][j];
            }
        }
        for (int j = 0; j < dimension; j++) {
            mean[j] /= Math.max(count, 1);
        }
        long[] bits = new long[n * words];
        split(n, chunks, (chunk, start, stop) -> {
            for (int i = start; i < stop; i++) {
                double scale = inverseNorm[i];
                if (scale == 0.0) {
                    continue;
                }
                for (int w = 0, o = i * dimension; w < words; w++) {
                    long word = 0L;
                    for (int j = w * 64, end = Math.min(dimension, j + 64); j < end; j++) {
                        word |= (codes[o + j] * scale > mean[j] ? 1L : 0L) << j;
                    }
                    bits[i * words + w] = word;
                }
            }
        });
        return bits;
    }

    int size() {
        return nodes.length;
    }

    /** An array of {@link #size()} doubles for one call, to hand back with {@link #giveBack}; its
     * values are whatever the last call left. */
    double[] borrowRowValues() {
        double[] kept = rowValues.poll();
        if (kept == null) {
            return new double[nodes.length];
        }
        pooled.decrementAndGet();
        return kept;
    }

    void giveBack(double[] values) {
        if (values.length == nodes.length && pooled.incrementAndGet() <= POOLED) {
            rowValues.offer(values);
        } else if (values.length == nodes.length) {
            pooled.decrementAndGet();
        }
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

    /** Heap taken by an index of {@code rows} sketches of {@code dimension} codes: the codes, their
     * sign bits, the id, norm and error of each row, and the id-to-row map (two to four slots of 12
     * bytes a row). */
    static long bytes(long rows, int dimension) {
        return rows * (dimension + (dimension + 63L) / 64 * 8 + 24L + 48L);
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
     * The approximate cosine with the query (from the codes) of every node, or of the rows listed in
     * {@code rows} (null: all), into {@code approx[p]} for the p-th of them, and its half-width
     * (sketch error plus the query's rounding) into {@code width[p]}.
     */
    void bounds(Scoring scoring, boolean simd, int[] rows, double[] approx, double[] width) {
        int n = rows == null ? nodes.length : rows.length;
        if (n == 0) {
            return;
        }
        if (dimension > 0) {
            scoring.checkDimension(dimension);
        }
        int[] query = scoring.queryCodes();
        double scale = scoring.codeScale();
        double rounding = scoring.codeError();
        // Listed rows lie far apart: each waits for memory, so the cores pay off four times sooner.
        split(n, chunks((long) n * dimension * (rows == null ? 1 : 4)), (chunk, start, stop) -> {
            for (int p = start; p < stop; p++) {
                int i = rows == null ? p : rows[p];
                if (inverseNorm[i] == 0.0) {
                    approx[p] = 0.0;
                } else {
                    approx[p] = scale * dot(query, i * dimension, simd) * inverseNorm[i];
                }
                width[p] = error[i] + rounding;
            }
        });
    }

    /**
     * About {@code keep} rows likely to hold the query's nearest nodes, ascending; null when that is
     * every row (then the whole index is scanned). Two estimates from the sign bits, each keeping
     * every row tied with its last (so the rows kept never depend on an order among equals):
     * Hamming distance to the query's signs keeps the nearest {@code 10 * keep}; of those, the
     * inner product of the signs (as +1 / -1) with the query rounded to 16 levels keeps the best
     * {@code keep}. Rows without a sketch are always kept: their bounds are unbounded, and the exact
     * score decides.
     *
     * <p>One pass over the bits does both: the second estimate is taken right after the first,
     * while the row is in cache, for every row within a distance guessed from the first sixteenth
     * of the pass. A second pass over rows scattered through 90 MB (MAG scale) waited for memory
     * row by row and took as long as the first. Rows the guess left out are scored afterwards;
     * without {@code guessing} every row is (the same rows come out: tests compare the two).
     */
    int[] preselect(Scoring scoring, int keep, boolean guessing) {
        int n = nodes.length;
        if (dimension <= 0 || keep <= 0 || keep >= n) {
            return null;
        }
        scoring.checkDimension(dimension);
        Query query = new Query(scoring.query(), words);
        long wanted = Math.min(n, 10L * keep);
        int chunks = chunks((long) n * words * 8);
        int[][] counts = new int[chunks][dimension + 1];
        int[] guess = new int[chunks];
        Scored[] scored = new Scored[chunks];
        if (!guessing) {  // nothing scored in a first pass: every row is left to the passes below
            Arrays.fill(guess, -1);
            Arrays.setAll(scored, chunk -> new Scored());
        } else {
            split(n, chunks, (chunk, start, stop) -> {
                int[] count = counts[chunk];
                int sampled = Math.min(stop, start + Math.max(256, (stop - start) / 16));
                int[] sample = new int[dimension + 1];
                for (int i = start; i < sampled; i++) {
                    sample[hamming(i, query)]++;
                }
                // The sample's distance at 1.25 times the share wanted. Only rows within it are counted
                // and scored: the rest never needs more than its distance.
                long share = (long) Math.ceil(1.25 * wanted / n * (sampled - start));
                int within = cutoff(new int[][] {sample}, share, false);
                guess[chunk] = within;
                Scored here = new Scored();
                for (int i = start; i < stop; i++) {
                    int h = hamming(i, query);
                    if (h <= within) {
                        count[h]++;
                        here.add(i, h, levelScore(i, query));
                    }
                }
                scored[chunk] = here;
            });
        }
        // Every chunk counted every distance up to the smallest guess: the cutoff is exact when it
        // lies there. Else (the guesses fell short) all distances are counted, and the rows between
        // a chunk's guess and the cutoff scored, in passes of their own.
        int counted = Arrays.stream(guess).min().orElse(dimension);
        int reached = cutoff(counts, wanted, false);
        if (reached > counted) {
            int[][] all = new int[chunks][dimension + 1];
            split(n, chunks, (chunk, start, stop) -> {
                for (int i = start; i < stop; i++) {
                    all[chunk][hamming(i, query)]++;
                }
            });
            reached = cutoff(all, wanted, false);
        }
        int farthest = reached;
        split(n, chunks, (chunk, start, stop) -> {
            Scored here = scored[chunk];
            if (farthest > guess[chunk]) {
                for (int i = start; i < stop; i++) {
                    int h = hamming(i, query);
                    if (h > guess[chunk] && h <= farthest) {
                        here.add(i, h, levelScore(i, query));
                    }
                }
                here.sort();
            }
            here.keepWithin(farthest);
        });
        int span = 15 * dimension;
        int[][] levels = new int[chunks][2 * span + 1];
        for (int c = 0; c < chunks; c++) {
            for (int p = 0; p < scored[c].size; p++) {
                levels[c][scored[c].score[p] + span]++;
            }
        }
        int lowest = cutoff(levels, keep, true) - span;
        // The rows kept, ascending, and every row without a sketch among them.
        int[] out = new int[keep + unsketched.length];
        int m = 0;
        int u = 0;
        for (Scored here : scored) {
            for (int p = 0; p < here.size; p++) {
                if (here.score[p] < lowest) {
                    continue;
                }
                int row = here.row[p];
                for (; u < unsketched.length && unsketched[u] <= row; u++) {
                    out = Retrieval.append(out, m++, unsketched[u]);
                }
                if (m == 0 || out[m - 1] != row) {
                    out = Retrieval.append(out, m++, row);
                }
            }
        }
        for (; u < unsketched.length; u++) {
            out = Retrieval.append(out, m++, unsketched[u]);
        }
        return Arrays.copyOf(out, m);
    }

    /** The query's signs, and its values rounded to 16 levels over [-peak, peak] as 4 bit planes;
     * at 384 dimensions (six words a row) also each word on its own, for {@link #hamming6}. */
    private static final class Query {
        final long[] signs;
        final long[] planes;
        final boolean six;
        final long s0, s1, s2, s3, s4, s5;

        Query(double[] q, int words) {
            signs = new long[words];
            planes = new long[4 * words];
            double peak = 0.0;
            for (double v : q) {
                peak = Math.max(peak, Math.abs(v));
            }
            double step = 2.0 * peak / 15.0;
            for (int j = 0; j < q.length; j++) {
                if (q[j] > 0.0) {
                    signs[j >>> 6] |= 1L << j;
                }
                int level = (int) Math.max(0, Math.min(15, Math.rint((q[j] + peak) / step)));
                for (int b = 0; b < 4; b++) {
                    if ((level >>> b & 1) != 0) {
                        planes[b * words + (j >>> 6)] |= 1L << j;
                    }
                }
            }
            six = words == 6;
            long[] w = six ? signs : new long[6];
            s0 = w[0];
            s1 = w[1];
            s2 = w[2];
            s3 = w[3];
            s4 = w[4];
            s5 = w[5];
        }
    }

    /** Hamming distance of row i's signs to the query's (a row without a sketch has no bits set). */
    private int hamming(int i, Query query) {
        if (query.six) {
            return hamming6(i, query);
        }
        long[] q = query.signs;
        int h = 0;
        for (int w = 0, o = i * words; w < words; w++) {
            h += Long.bitCount(signs[o + w] ^ q[w]);
        }
        return h;
    }

    /** {@link #hamming} written out for six words: the JIT keeps the query's words in registers,
     * where the loop over a row's words (its count known only at run time) took twice as long. */
    private int hamming6(int i, Query q) {
        int o = i * 6;
        long[] s = signs;
        return Long.bitCount(s[o] ^ q.s0) + Long.bitCount(s[o + 1] ^ q.s1) + Long.bitCount(s[o + 2] ^ q.s2)
                + Long.bitCount(s[o + 3] ^ q.s3) + Long.bitCount(s[o + 4] ^ q.s4) + Long.bitCount(s[o + 5] ^ q.s5);
    }

    /** sum_j (2 s_j - 1) * level_j of row i, up to terms equal for every row: 2 * sum_b 2^b
     * popcount(s & plane_b) - 15 popcount(s), in [-15 d, 15 d]. */
    private int levelScore(int i, Query query) {
        long[] planes = query.planes;
        int s = 0;
        for (int w = 0, o = i * words; w < words; w++) {
            long x = signs[o + w];
            s += 2 * (Long.bitCount(x & planes[w]) + 2 * Long.bitCount(x & planes[words + w])
                    + 4 * Long.bitCount(x & planes[2 * words + w]) + 8 * Long.bitCount(x & planes[3 * words + w]))
                    - 15 * Long.bitCount(x);
        }
        return s;
    }

    /** Rows of one chunk with their distance and second estimate. */
    private static final class Scored {
        int[] row = new int[256];
        int[] distance = new int[256];
        int[] score = new int[256];
        int size;

        void add(int i, int h, int s) {
            if (size == row.length) {
                row = Arrays.copyOf(row, 2 * size);
                distance = Arrays.copyOf(distance, 2 * size);
                score = Arrays.copyOf(score, 2 * size);
            }
            row[size] = i;
            distance[size] = h;
            score[size++] = s;
        }

        /** By row, after rows were added out of order. */
        void sort() {
            Integer[] order = new Integer[size];
            for (int p = 0; p < size; p++) {
                order[p] = p;
            }
            Arrays.sort(order, (a, b) -> Integer.compare(row[a], row[b]));
            int[] r = new int[size];
            int[] d = new int[size];
            int[] s = new int[size];
            for (int p = 0; p < size; p++) {
                r[p] = row[order[p]];
                d[p] = distance[order[p]];
                s[p] = score[order[p]];
            }
            row = r;
            distance = d;
            score = s;
        }

        /** Drops the rows farther than {@code farthest}. */
        void keepWithin(int farthest) {
            int m = 0;
            for (int p = 0; p < size; p++) {
                if (distance[p] <= farthest) {
                    row[m] = row[p];
                    distance[m] = distance[p];
                    score[m++] = score[p];
                }
            }
            size = m;
        }
    }

    /** The value at which the per-chunk {@code counts} (summed) reach {@code wanted} rows, counting
     * from the smallest value up, or with {@code fromTop} from the largest down; the far end when
     * there are fewer. */
    private static int cutoff(int[][] counts, long wanted, boolean fromTop) {
        int values = counts[0].length;
        long seen = 0;
        for (int k = 0; k < values; k++) {
            int v = fromTop ? values - 1 - k : k;
            for (int[] count : counts) {
                seen += count[v];
            }
            if (seen >= wanted) {
                return v;
            }
        }
        return fromTop ? 0 : values - 1;
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
