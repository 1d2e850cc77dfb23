package io.github.seederdgl.procedures;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The int8 sketches the procedures have read, kept between calls by node id, per database,
 * dataset label and sketch property.
 *
 * <p>Bounding a neighbour costs little arithmetic but a read of its sketch from the store (the
 * node's property chain, then the array's own records): at hop 2 around a hub that is tens of
 * thousands of reads per query, most of the K-hop's time. The sketches change only when
 * seeder-dgl writes them (ingest, upsert, adopt), and every such write gives the dataset record
 * a new {@code sketch_version}; the calling statement passes that version in the config map, so
 * a cache filled under one version is never read under another. Without a version nothing is
 * cached. The cache decides nothing on its own: a bound only chooses whose embedding is read
 * (see {@link Scoring}), and every node still has its label and exact score read from the store,
 * so a stale entry (a node deleted and its id reused) can widen that choice, never change a result.
 *
 * <p>Each generation holds at most an eighth of the heap; past that, sketches are read as before.
 */
final class SketchCache {
    /** One node's sketch: its codes (null: the node has none), the sum of their squares, its error. */
    record Sketch(byte[] codes, int squares, double error) {
        long bytes() {
            return 64L + (codes == null ? 0 : codes.length);
        }
    }

    /** The sketches read under one {@code sketch_version}. */
    static final class Generation {
        final String version;
        private final ConcurrentHashMap<Long, Sketch> sketches = new ConcurrentHashMap<>();
        private final AtomicLong bytes = new AtomicLong();

        Generation(String version) {
            this.version = version;
        }

        Sketch get(long node) {
            return sketches.get(node);
        }

        void put(long node, Sketch sketch) {
            long size = sketch.bytes() + 64L;  // the entry, its boxed key and the record
            if (bytes.get() + size <= BUDGET && sketches.putIfAbsent(node, sketch) == null) {
                bytes.addAndGet(size);
            }
        }
    }

    static final long BUDGET = Runtime.getRuntime().maxMemory() / 8;
    private static final ConcurrentHashMap<String, Generation> GENERATIONS = new ConcurrentHashMap<>();

    private SketchCache() {
    }

    /** Drops what is kept for this database, label and property (the next call starts empty). */
    static void drop(String database, String label, String property) {
        GENERATIONS.remove(database + '\u0000' + label + '\u0000' + property);
    }

    /**
     * The generation of {@code version} for this database, label and property (a new one, dropping
     * the old, when the version changed); null when {@code version} is null: no caching.
     */
    static Generation of(String database, String label, String property, String version) {
        if (version == null || version.isEmpty()) {
            return null;
        }
        String key = database + '\u0000' + label + '\u0000' + property;
        return GENERATIONS.compute(key, (k, old) -> old != null && old.version.equals(version)
                ? old : new Generation(version));
    }
}
