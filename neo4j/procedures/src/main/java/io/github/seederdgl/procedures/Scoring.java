package io.github.seederdgl.procedures;

import java.util.List;
import java.util.Map;

import org.neo4j.graphdb.Direction;
import org.neo4j.graphdb.Node;
import org.neo4j.graphdb.Relationship;
import org.neo4j.graphdb.RelationshipType;
import org.neo4j.graphdb.ResourceIterable;

/**
 * sim(q, u) for one query, at the in-memory reference's precision (seeder_dgl/retrieval/memory.py):
 * the query is made a unit vector in double, each stored float32 embedding is cast to double and
 * not renormalised, and the dot product is summed in double.
 *
 * <p>Bounds come first: the int8 sketch of a node (seeder_dgl/graphstore/sketch.py) bounds
 * |sim(q, u) - cos(q, codes)| by its {@code sketch_error} for every unit query, so a node whose
 * upper bound cannot reach the selection is never scored exactly. The sketch decides whose
 * embedding is read, never a score.
 *
 * <p>cos(q, codes) itself is taken in integers, from the query rounded to 16-bit codes
 * {@code k = round(q / t)}, {@code t = max|q_i| / 32767}: with {@code q = t k + r}, every
 * {@code |r_i| <= t / 2}, so {@code |q . c - t k . c| / ||c|| <= ||r|| <= t / 2 sqrt(d)}, a
 * thousandth of the sketch's own error, added to the bound. Every neighbour of the frontier is
 * bounded, and the sum in integers took 380 against 490 ns a node in double (384 dimensions; in
 * double each addition waits for the previous one).
 */
final class Scoring {
    /** Property names of an ingested dataset: the defaults of {@link Properties}. */
    static final String ID = "id";
    static final String EMBEDDING = "embedding";
    static final String SKETCH = "sketch";
    static final String SKETCH_ERROR = "sketch_error";
    static final String TYPE = "type";
    static final String NAME = "name";
    /** A node without a sketch: bounds wider than any cosine, so it is always scored exactly. */
    static final double NO_SKETCH_ERROR = 2.0;
    private static final int QUERY_LEVELS = 32767;
    /** Covers the double rounding of the few operations after the integer sums. */
    private static final double ROUNDING = 1e-12;

    /**
     * Where a dataset keeps what the procedures read (seeder_dgl/graphstore/schema.py): the property
     * names on its nodes and the relationship types it traverses. An ingested dataset uses the
     * defaults; a graph adopted in place has its own, prefixed with its label, beside the user's
     * properties. From the optional {@code config} map of each procedure; a key not given keeps
     * its default, so calls without a config read what they always read.
     */
    static final class Properties {
        final String id;
        final String embedding;
        final String sketch;
        final String sketchError;
        final String type;
        final String name;
        /** The relationship types to traverse; null: every type. */
        final RelationshipType[] types;
        /** The dataset record's sketch_version when the caller read it; null: cache nothing ({@link SketchCache}). */
        final String sketchVersion;
        /** Exact seeding through the flat {@link SeedIndex} (config {@code seed_index}, default true);
         * false reads every node from the store, as without a version. */
        final boolean seedIndex;
        /** The index's sums in SIMD lanes where the server can ({@code simd}, default true); false:
         * scalar. Both give the same integers: these two switches exist to show that they do. */
        final boolean simd;
        /** K-hop waits for the {@link SeedIndex} to be built when none is current ({@code seed_index_wait},
         * default false: bound from the store meanwhile, while it is built in the background). */
        final boolean seedIndexWait;
        /** K-hop walks the in-memory copy of the dataset's relationships while the database has had
         * no such write since it was read ({@link Adjacency}; config {@code adjacency}, default true). */
        final boolean adjacency;
        /** When no valid copy is there, read one in this call before walking it ({@code adjacency_wait},
         * default false: walk the store now, read the copy in the background). */
        final boolean adjacencyWait;
        /** K-hop on the relationships' copy scores survivors from an in-memory copy of the nodes' ids,
         * embeddings, types and names while no write changed them ({@link NodeCopy}; config
         * {@code node_copy}, default true; the same scores and features either way). */
        final boolean nodeCopy;
        /** When no valid node copy is there, read one in this call ({@code node_copy_wait}, default false). */
        final boolean nodeCopyWait;
        /** K-hop also returns the embedding, type and name of every selected node, read once with
         * its score ({@code features}, default false), so that no second call has to read them. */
        final boolean features;
        /** Exact seeding over the rows a 1-bit scan of the {@link SeedIndex} preselects: about this
         * many (config {@code candidates}, default 0: every node of the dataset, exactly). */
        final int candidates;
        /** The preselection guesses from a sample which rows to estimate twice in its first pass
         * ({@code preselect_guess}, default true); false leaves every row to the passes that
         * follow a guess found short. The same rows either way: the switch exists for tests. */
        final boolean preselectGuess;

        Properties(Map<String, Object> config) {
            Map<String, Object> c = config == null ? Map.of() : config;
            id = text(c, "id", ID);
            embedding = text(c, "embedding", EMBEDDING);
            sketch = text(c, "sketch", SKETCH);
            sketchError = text(c, "sketch_error", SKETCH_ERROR);
            type = text(c, "type", TYPE);
            name = text(c, "name", NAME);
            Object version = c.get("sketch_version");
            sketchVersion = version == null ? null : version.toString();
            seedIndex = flag(c, "seed_index");
            simd = flag(c, "simd");
            adjacency = flag(c, "adjacency");
            adjacencyWait = c.get("adjacency_wait") != null && flag(c, "adjacency_wait");
            seedIndexWait = c.get("seed_index_wait") != null && flag(c, "seed_index_wait");
            features = c.get("features") != null && flag(c, "features");
            nodeCopy = flag(c, "node_copy");
            nodeCopyWait = c.get("node_copy_wait") != null && flag(c, "node_copy_wait");
            candidates = count(c, "candidates");
            preselectGuess = flag(c, "preselect_guess");
            Object given = c.get("types");
            if (given == null) {
                types = null;
            } else if (given instanceof List<?> list) {
                types = new RelationshipType[list.size()];
                for (int i = 0; i < list.size(); i++) {
                    if (!(list.get(i) instanceof String value) || value.isEmpty()) {
                        throw new IllegalArgumentException("config.types must be a list of relationship type names");
                    }
                    types[i] = RelationshipType.withName(value);
                }
            } else {
                throw new IllegalArgumentException("config.types must be a list of relationship type names or null");
            }
        }

        private static boolean flag(Map<String, Object> config, String key) {
            Object value = config.get(key);
            if (value == null) {
                return true;
            }
            if (!(value instanceof Boolean on)) {
                throw new IllegalArgumentException("config." + key + " must be true or false");
            }
            return on;
        }

        private static int count(Map<String, Object> config, String key) {
            Object value = config.get(key);
            if (value == null) {
                return 0;
            }
            if (!(value instanceof Long number) || number < 0) {
                throw new IllegalArgumentException("config." + key + " must be a whole number of nodes (0: all)");
            }
            return (int) Math.min(number, Integer.MAX_VALUE);
        }

        private static String text(Map<String, Object> config, String key, String fallback) {
            Object value = config.get(key);
            if (value == null) {
                return fallback;
            }
            if (!(value instanceof String name) || name.isEmpty()) {
                throw new IllegalArgumentException("config." + key + " must be a property name");
            }
            return name;
        }

        /** What a selected node's exact score reads: with {@link #features}, its type and name too. */
        String[] scoredKeys() {
            return features ? new String[] {id, embedding, type, name} : exactKeys();
        }

        /** What a candidate's exact score reads. Most candidates that survive the bounds are not
         * picked, so their type and name are not read ({@link #labelKeys}, for the picked ones). */
        String[] exactKeys() {
            return new String[] {id, embedding};
        }

        /** The type and name a picked node's features add to {@link #exactKeys}. */
        String[] labelKeys() {
            return new String[] {type, name};
        }

        /** The node's relationships in {@code direction} of the types this dataset traverses. */
        ResourceIterable<Relationship> relationships(Node node, Direction direction) {
            return types == null ? node.getRelationships(direction) : node.getRelationships(direction, types);
        }
    }

    private final double[] query;
    private final int[] queryCodes;
    private final double codeScale;
    private final double codeError;
    private final Properties properties;
    private final SketchCache.Generation cache;

    /** {@code cache}: the sketches kept under the dataset's current sketch version, or null. */
    Scoring(List<Double> embedding, Properties properties, SketchCache.Generation cache) {
        this.properties = properties;
        this.cache = cache;
        if (embedding == null || embedding.isEmpty()) {
            throw new IllegalArgumentException("the query embedding is empty");
        }
        double[] q = new double[embedding.size()];
        double norm = 0.0;
        for (int i = 0; i < q.length; i++) {
            Double value = embedding.get(i);
            if (value == null) {
                throw new IllegalArgumentException("the query embedding holds a null");
            }
            q[i] = value;
            norm += q[i] * q[i];
        }
        norm = Math.sqrt(norm);
        if (!(norm > 0.0) || Double.isInfinite(norm)) {
            throw new IllegalArgumentException("the query embedding is zero or not finite");
        }
        double peak = 0.0;
        for (int i = 0; i < q.length; i++) {
            q[i] /= norm;
            peak = Math.max(peak, Math.abs(q[i]));
        }
        this.query = q;
        this.codeScale = peak / QUERY_LEVELS;
        this.queryCodes = new int[q.length];
        for (int i = 0; i < q.length; i++) {
            queryCodes[i] = (int) Math.rint(q[i] / codeScale);
        }
        this.codeError = codeScale / 2.0 * Math.sqrt(q.length) + ROUNDING;
    }

    /** {low, high} around sim(q, node) from its sketch; the widest bounds when it has none. */
    void bound(Node node, double[] out) {
        SketchCache.Sketch sketch = sketchOf(node, properties, cache);
        double approx = 0.0;
        double width = NO_SKETCH_ERROR;
        byte[] c = sketch.codes();
        if (c != null) {
            checkDimension(c.length);
            long dot = 0;
            for (int i = 0; i < c.length; i++) {
                dot += c[i] * queryCodes[i];
            }
            approx = codeScale * dot / Math.sqrt(sketch.squares());
            width = sketch.error() + codeError;
        }
        out[0] = approx - width;
        out[1] = approx + width;
    }

    /** The node's sketch, from {@code cache} when it holds it (or kept there after reading); cache may be null. */
    static SketchCache.Sketch sketchOf(Node node, Properties properties, SketchCache.Generation cache) {
        if (cache == null) {
            return read(node, properties);
        }
        long key = nodeKey(node);
        SketchCache.Sketch sketch = cache.get(key);
        if (sketch == null) {
            sketch = read(node, properties);
            cache.put(key, sketch);
        }
        return sketch;
    }

    /** The cache key of a node: its internal id, which is cheap where the element id is a string
     * built on every call. Ids are reused after deletions; see {@link SketchCache} for why a reused
     * id cannot change a result. */
    @SuppressWarnings("deprecation")
    static long nodeKey(Node node) {
        return node.getId();
    }

    /** The node's sketch as stored; codes null when it has none (or only zeros: no direction). */
    private static SketchCache.Sketch read(Node node, Properties properties) {
        Map<String, Object> stored = node.getProperties(properties.sketch, properties.sketchError);
        Object codes = stored.get(properties.sketch);
        Object error = stored.get(properties.sketchError);
        if (codes instanceof byte[] c && error instanceof Number e) {
            int squares = 0;
            for (byte code : c) {
                squares += code * code;
            }
            if (squares > 0) {
                return new SketchCache.Sketch(c, squares, e.doubleValue());
            }
        }
        return new SketchCache.Sketch(null, 0, NO_SKETCH_ERROR);
    }

    /** The node's id property and sim(q, node); a node without an embedding scores 0, as its zero
     * row in an export of the graph does. */
    double exact(Node node, long[] id) {
        return exact(node.getProperties(properties.id, properties.embedding), id);
    }

    /** {@link #exact(Node, long[])} from the node's properties as read (at least id and embedding). */
    double exact(Map<String, Object> stored, long[] id) {
        Object key = stored.get(properties.id);
        if (!(key instanceof Number)) {
            throw new IllegalArgumentException("a node with the dataset's label has no integer id property");
        }
        id[0] = ((Number) key).longValue();
        Object value = stored.get(properties.embedding);
        if (value instanceof float[] z) {
            return exact(z, 0, z.length);
        }
        double sum = 0.0;
        if (value instanceof double[]) {
            double[] z = (double[]) value;
            checkDimension(z.length);
            for (int i = 0; i < z.length; i++) {
                sum += z[i] * query[i];
            }
        }
        return sum;
    }

    /** sim(q, u) of a float32 embedding kept at {@code values[offset, offset + length)}: a stored
     * embedding and the copy of the nodes both sum here, so their scores agree to the last bit. */
    double exact(float[] values, int offset, int length) {
        checkDimension(length);
        double sum = 0.0;
        for (int i = 0; i < length; i++) {
            sum += (double) values[offset + i] * query[i];
        }
        return sum;
    }

    int[] queryCodes() {
        return queryCodes;
    }

    /** The query as a unit vector. */
    double[] query() {
        return query;
    }

    /** The query is {@code codeScale() * queryCodes()} up to rounding. */
    double codeScale() {
        return codeScale;
    }

    /** What the query's rounding adds to a bound. */
    double codeError() {
        return codeError;
    }

    void checkDimension(int length) {
        if (length != query.length) {
            throw new IllegalArgumentException("a stored vector has " + length + " dimensions but the query has "
                    + query.length + ": encode the query with the dataset's model");
        }
    }

    /**
     * The k-th largest of the values offered so far (minus infinity until there are k): a node
     * whose upper bound is below it now stays below it, since it only rises.
     */
    static final class KthLargest {
        private final double[] heap;
        private int size;

        KthLargest(int k) {
            heap = new double[Math.max(k, 1)];
        }

        void offer(double value) {
            if (size < heap.length) {
                int i = size++;
                heap[i] = value;
                while (i > 0 && heap[(i - 1) / 2] > heap[i]) {
                    swap(i, (i - 1) / 2);
                    i = (i - 1) / 2;
                }
            } else if (value > heap[0]) {
                heap[0] = value;
                int i = 0;
                while (true) {
                    int smallest = i;
                    int left = 2 * i + 1;
                    int right = left + 1;
                    if (left < size && heap[left] < heap[smallest]) {
                        smallest = left;
                    }
                    if (right < size && heap[right] < heap[smallest]) {
                        smallest = right;
                    }
                    if (smallest == i) {
                        return;
                    }
                    swap(i, smallest);
                    i = smallest;
                }
            }
        }

        double value() {
            return size < heap.length ? Double.NEGATIVE_INFINITY : heap[0];
        }

        private void swap(int a, int b) {
            double t = heap[a];
            heap[a] = heap[b];
            heap[b] = t;
        }
    }
}
