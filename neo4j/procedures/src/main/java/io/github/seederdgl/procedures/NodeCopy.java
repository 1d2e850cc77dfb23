package io.github.seederdgl.procedures;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Label;
import org.neo4j.graphdb.Node;
import org.neo4j.graphdb.Transaction;

/**
 * The id, embedding, type and name of every node of an {@link Adjacency} copy, row by row, for
 * K-hop's exact scores and features.
 *
 * <p>Every neighbour that survives its bound is scored from its embedding, and through the store
 * that is a node record, its property chain and the array's own records for each of them (a
 * MetaQA query scores about two thousand): after the bounds moved into SIMD lanes and the walk
 * into {@link Adjacency}, those reads were most of what was left of a K-hop. Here a survivor is
 * scored from a float row in memory, with the store path's arithmetic (each float cast to double,
 * the products summed in dimension order), so scores are the same to the last bit.
 *
 * <p>The copy is trusted only while it belongs to the current {@link Adjacency} copy (no node,
 * relationship or label written since) and the database's property counter ({@link Changes}) stands
 * where it stood when reading began: a write of any of the four properties, by seeder-dgl or by the
 * user's own Cypher, on any node, and K-hop reads the store again while a new copy is read in the
 * background. A row whose properties are not what an ingest writes (no integer id, an embedding of
 * doubles or of another length, a type that is not text) is read from the store as before, so every
 * error and edge case stays the store path's.
 *
 * <p>Each copy holds at most an eighth of the heap (MetaQA, 43k nodes of 384 dimensions: 69 MB;
 * Prime, 129k nodes: 0.2 GB), and all copies together a quarter ({@link CopyBudget}); a larger
 * dataset is scored from the store as before.
 */
final class NodeCopy {
    static final long BUDGET = Runtime.getRuntime().maxMemory() / 8;
    /** A row's kind: its embedding is in {@link #embeddings}; it has none (it scores 0); read it from the store. */
    static final byte FLOATS = 0;
    static final byte NO_EMBEDDING = 1;
    static final byte STORE = 2;
    private static final ConcurrentHashMap<String, NodeCopy> COPIES = new ConcurrentHashMap<>();
    private static final CopyReader READER = new CopyReader("seeder-dgl node copy");

    /** The relationships' copy whose rows these are. */
    final Adjacency adjacency;
    /** The database's property counter when reading began. */
    final long stamp;
    /** False when the dataset is above the budget or a node was gone: remembered under the stamps. */
    final boolean usable;
    /** Length of every {@link #FLOATS} row's embedding; 0 when there is none. */
    final int dimension;
    /** The heap the copy holds, about. */
    final long bytes;
    private final byte[] kinds;
    private final long[] ids;
    private final float[] embeddings;
    private final String[] types;
    private final String[] names;

    private NodeCopy(Adjacency adjacency, long stamp, boolean usable, int dimension, long bytes, byte[] kinds,
                     long[] ids, float[] embeddings, String[] types, String[] names) {
        this.adjacency = adjacency;
        this.stamp = stamp;
        this.usable = usable;
        this.dimension = dimension;
        this.bytes = bytes;
        this.kinds = kinds;
        this.ids = ids;
        this.embeddings = embeddings;
        this.types = types;
        this.names = names;
    }

    /**
     * The copy of {@code adjacency}'s nodes to score from now; null: read the store (no valid copy,
     * or the database's writes cannot be tracked). When none is valid a new one is read: in a thread
     * of its own (this call reads the store meanwhile), or in this call when {@code wait}.
     */
    static NodeCopy current(GraphDatabaseService db, Transaction tx, Adjacency adjacency, Label label,
                            Scoring.Properties properties, boolean wait) {
        String database = db.databaseName();
        AtomicLong counter = Changes.propertyCounter(database);
        if (counter == null) {
            return null;
        }
        Changes.watch(database, properties.id, properties.embedding, properties.type, properties.name);
        String key = String.join("\u0000", database, label.name(), properties.id, properties.embedding,
                properties.type, properties.name);
        NodeCopy copy = COPIES.get(key);
        if (copy != null && copy.adjacency == adjacency && copy.stamp == counter.get()) {
            return copy.usable ? copy : null;
        }
        if (copy != null) {
            COPIES.remove(key, copy);
            CopyBudget.release(copy);
        }
        if (wait) {
            NodeCopy read = read(counter, tx, adjacency, properties);
            if (read.stamp == counter.get()) {
                read = keep(key, read, db, label);
                return read.usable ? read : null;
            }
            return null;
        }
        READER.start(db, key, label.name(), own -> {
            NodeCopy read = read(counter, own, adjacency, properties);
            if (read.stamp != counter.get()) {
                return false;
            }
            keep(key, read, db, label);
            return true;
        });
        return null;
    }

    /** Keeps {@code read} under {@code key}: as read, or as unusable where the heap all copies share
     * ({@link CopyBudget}) cannot hold it. */
    private static NodeCopy keep(String key, NodeCopy read, GraphDatabaseService db, Label label) {
        return CopyBudget.keep(COPIES, key, read, read.usable, "nodes", label.name(), read.bytes,
                () -> read.stillCurrent(db), () -> unusable(read.adjacency, read.stamp));
    }

    /** Every row's properties, as the store gives them now. */
    private static NodeCopy read(AtomicLong counter, Transaction tx, Adjacency adjacency,
                                 Scoring.Properties properties) {
        long stamp = counter.get();
        int n = adjacency.size();
        byte[] kinds = new byte[n];
        long[] ids = new long[n];
        String[] types = new String[n];
        String[] names = new String[n];
        float[] embeddings = null;
        int dimension = 0;
        long bytes = 64L * n;
        String[] keys = {properties.id, properties.embedding, properties.type, properties.name};
        for (int r = 0; r < n; r++) {
            if ((r & 1023) == 0 && counter.get() != stamp) {
                return unusable(adjacency, stamp - 1);  // stale already: never trusted
            }
            Node node = Adjacency.nodeById(tx, adjacency.node(r));
            if (node == null) {
                return unusable(adjacency, stamp - 1);  // the relationships' copy is stale too
            }
            Map<String, Object> stored = node.getProperties(keys);
            Object id = stored.get(properties.id);
            Object embedding = stored.get(properties.embedding);
            Object type = stored.get(properties.type);
            Object name = stored.get(properties.name);
            if (embeddings == null && embedding instanceof float[] first && first.length > 0) {
                dimension = first.length;
                bytes += 4L * n * dimension;
                if (bytes > BUDGET || (long) n * dimension > Integer.MAX_VALUE - 16) {
                    return unusable(adjacency, stamp);
                }
                embeddings = new float[n * dimension];
            }
            if (!(id instanceof Number number) || (type != null && !(type instanceof String))) {
                kinds[r] = STORE;
                continue;
            }
            if (embedding == null) {
                kinds[r] = NO_EMBEDDING;
            } else if (embedding instanceof float[] z && dimension > 0 && z.length == dimension) {
                System.arraycopy(z, 0, embeddings, r * dimension, dimension);
                kinds[r] = FLOATS;
            } else {
                kinds[r] = STORE;
                continue;
            }
            ids[r] = number.longValue();
            types[r] = (String) type;
            // As Retrieval.FeatureRows sends a name: as text, "" for none.
            names[r] = name == null ? "" : name.toString();
            bytes += 48L + 2L * names[r].length();
            if (bytes > BUDGET) {
                return unusable(adjacency, stamp);
            }
        }
        return new NodeCopy(adjacency, stamp, true, dimension, bytes, kinds, ids,
                embeddings == null ? new float[0] : embeddings, types, names);
    }

    private static NodeCopy unusable(Adjacency adjacency, long stamp) {
        return new NodeCopy(adjacency, stamp, false, 0, 0, new byte[0], new long[0], new float[0], new String[0],
                new String[0]);
    }

    /** Whether nothing this copy or its relationships' copy holds has been written since they were read. */
    boolean stillCurrent(GraphDatabaseService db) {
        AtomicLong properties = Changes.propertyCounter(db.databaseName());
        AtomicLong walked = Changes.counter(db.databaseName());
        return properties != null && walked != null && properties.get() == stamp && walked.get() == adjacency.stamp;
    }

    byte kind(int row) {
        return kinds[row];
    }

    long id(int row) {
        return ids[row];
    }

    String type(int row) {
        return types[row];
    }

    String name(int row) {
        return names[row];
    }

    /** Row {@code row}'s embedding (a copy: the caller may keep it). */
    float[] embedding(int row) {
        return Arrays.copyOfRange(embeddings, row * dimension, (row + 1) * dimension);
    }

    /** sim(q, node) of a {@link #FLOATS} or {@link #NO_EMBEDDING} row, as {@link Scoring#exact} gives it. */
    double similarity(int row, Scoring scoring) {
        if (kinds[row] == NO_EMBEDDING) {
            return 0.0;
        }
        return scoring.exact(embeddings, row * dimension, dimension);
    }
}
