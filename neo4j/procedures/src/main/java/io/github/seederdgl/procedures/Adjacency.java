package io.github.seederdgl.procedures;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.neo4j.graphdb.Direction;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Label;
import org.neo4j.graphdb.Node;
import org.neo4j.graphdb.Relationship;
import org.neo4j.graphdb.ResourceIterable;
import org.neo4j.graphdb.ResourceIterator;
import org.neo4j.graphdb.Transaction;

/**
 * A copy of a dataset's relationships in flat arrays (compressed sparse rows over the nodes of its
 * label), for K-hop.
 *
 * <p>Through the store, a hop reads one relationship record per neighbour and builds a
 * relationship and a node object for it: at Prime scale (a hop meets tens of thousands of
 * neighbours) that was two fifths of the K-hop's time once the bounds were summed in SIMD lanes.
 * Here a neighbour is two array reads. The copy holds only relationships between nodes of the
 * label (K-hop never selects a node without it) and is trusted only while the database's
 * {@link Changes} counter stands where it stood when reading began: any relationship, node or
 * label written since, by seeder-dgl or anyone else, and K-hop walks the store again while a new
 * copy is read in the background. Scores never come from here: a survivor's id and embedding come
 * from the store or from {@link NodeCopy} (kept row for row beside this copy, under a counter of
 * its own), and a node found gone sends the call back to the store.
 *
 * <p>Each copy holds at most an eighth of the heap (Prime scale, 8.1M relationship ends: 66 MB),
 * and all copies together a quarter ({@link CopyBudget}); a larger dataset is walked through the
 * store as before.
 */
final class Adjacency {
    static final long BUDGET = Runtime.getRuntime().maxMemory() / 8;
    private static final ConcurrentHashMap<String, Adjacency> COPIES = new ConcurrentHashMap<>();
    private static final CopyReader READER = new CopyReader("seeder-dgl adjacency");
    /** Databases where seeder.trackChanges could not run (the procedure is sandboxed): never asked again. */
    private static final ConcurrentHashMap<String, Boolean> UNTRACKED = new ConcurrentHashMap<>();

    /** The {@link Changes} counter when reading began. */
    final long stamp;
    /** False when the dataset is above the budget: remembered under the stamp, so it is not read again. */
    final boolean usable;
    /** Internal node ids, by row. */
    private final long[] nodes;
    private final LongIntMap rows;
    /** Row r's relationship ends are {@code offsets[r]} to {@code offsets[r + 1]} (exclusive). */
    private final int[] offsets;
    /** The row at the other end. */
    private final int[] neighbours;
    /** Relationship type index << 1, | 1 where the relationship starts at this row's node. */
    private final int[] kinds;
    private final String[] typeNames;
    /** Each row's row in a {@link SeedIndex}, for the index it was looked up in (see {@link #seedRows}). */
    private volatile SeedRows seedRows;

    private record SeedRows(SeedIndex index, int[] rows) {
    }

    private Adjacency(long stamp, boolean usable, long[] nodes, LongIntMap rows, int[] offsets, int[] neighbours,
                      int[] kinds, String[] typeNames) {
        this.stamp = stamp;
        this.usable = usable;
        this.nodes = nodes;
        this.rows = rows;
        this.offsets = offsets;
        this.neighbours = neighbours;
        this.kinds = kinds;
        this.typeNames = typeNames;
    }

    /**
     * The copy of the label's relationships to walk now; null: walk the store (no copy is valid, or
     * the database's changes cannot be tracked). When none is valid a new one is read: in a thread of
     * its own (this call walks the store meanwhile), or in this call when {@code wait}.
     */
    static Adjacency current(GraphDatabaseService db, Transaction tx, Label label, Scoring.Properties properties,
                             boolean wait) {
        String database = db.databaseName();
        AtomicLong counter = tracked(db);
        if (counter == null) {
            return null;
        }
        String key = key(database, label, properties);
        Adjacency copy = COPIES.get(key);
        if (copy != null && copy.stamp == counter.get()) {
            return copy.usable ? copy : null;
        }
        if (copy != null) {
            COPIES.remove(key, copy);  // stale: not kept while the next one is read
            CopyBudget.release(copy);
        }
        if (wait) {
            Adjacency read = read(counter, tx, label, properties);
            if (read.stamp == counter.get()) {
                read = keep(key, read, counter, label);
                return read.usable ? read : null;
            }
            return null;
        }
        READER.start(db, key, label.name(), own -> {
            Adjacency read = read(counter, own, label, properties);
            if (read.stamp != counter.get()) {
                return false;
            }
            keep(key, read, counter, label);
            return true;
        });
        return null;
    }

    /** Keeps {@code read} under {@code key}: as read, or as unusable where the heap all copies share
     * ({@link CopyBudget}) cannot hold it. */
    private static Adjacency keep(String key, Adjacency read, AtomicLong counter, Label label) {
        return CopyBudget.keep(COPIES, key, read, read.usable, "relationships", label.name(), read.bytes(),
                () -> counter.get() == read.stamp, () -> unusable(read.stamp));
    }

    /** The heap this copy holds, about (its arrays, and the seed rows it may add). */
    long bytes() {
        return 44L * nodes.length + 8L * neighbours.length + 4L * offsets.length;
    }

    /** The database's change counter, asking the server to start it on first use; null where it cannot. */
    private static AtomicLong tracked(GraphDatabaseService db) {
        String database = db.databaseName();
        AtomicLong counter = Changes.counter(database);
        if (counter != null || UNTRACKED.containsKey(database)) {
            return counter;
        }
        // In a transaction of its own: a procedure the server keeps sandboxed fails when called,
        // and that failure would end the caller's transaction too.
        try {
            // (its rows are pulled: an unread result would not even call the procedure)
            db.executeTransactionally("CALL seeder.trackChanges() YIELD tracking RETURN tracking", Map.of(),
                    result -> result.hasNext());
        } catch (RuntimeException sandboxed) {
            UNTRACKED.put(database, Boolean.TRUE);
            return null;
        }
        return Changes.counter(database);
    }

    private static String key(String database, Label label, Scoring.Properties properties) {
        StringBuilder key = new StringBuilder(database).append('\u0000').append(label.name()).append('\u0000');
        if (properties.types == null) {
            key.append('*');
        } else {
            for (var type : properties.types) {
                key.append(type.name()).append('\u0001');
            }
        }
        return key.toString();
    }

    /** The label's nodes, then each one's relationships to nodes of the label. */
    private static Adjacency read(AtomicLong counter, Transaction tx, Label label, Scoring.Properties properties) {
        long stamp = counter.get();
        long[] nodes = new long[1024];
        int n = 0;
        try (ResourceIterator<Node> found = tx.findNodes(label)) {
            while (found.hasNext()) {
                if (n == nodes.length) {
                    nodes = Arrays.copyOf(nodes, n * 2);
                }
                nodes[n++] = Scoring.nodeKey(found.next());
            }
        }
        nodes = Arrays.copyOf(nodes, n);
        LongIntMap rows = new LongIntMap(n);
        for (int i = 0; i < n; i++) {
            rows.putIfAbsent(nodes[i], i);
        }
        long bytes = 40L * n;
        int[] offsets = new int[n + 1];
        int[] neighbours = new int[Math.max(16, 4 * n)];
        int[] kinds = new int[neighbours.length];
        int size = 0;
        Map<String, Integer> types = new HashMap<>();
        for (int i = 0; i < n; i++) {
            if (counter.get() != stamp) {
                return unusable(stamp - 1);  // stale already: never trusted
            }
            Node node = nodeById(tx, nodes[i]);
            if (node != null) {
                try (ResourceIterable<Relationship> edges = properties.relationships(node, Direction.BOTH)) {
                    for (Relationship r : edges) {
                        int other = rows.get(r.getOtherNodeId(nodes[i]));
                        if (other == LongIntMap.ABSENT) {
                            continue;
                        }
                        if (size == neighbours.length) {
                            bytes += 8L * size;  // what the next doubling adds
                            if (bytes > BUDGET || size > Integer.MAX_VALUE / 2 - 16) {
                                return unusable(stamp);
                            }
                            neighbours = Arrays.copyOf(neighbours, size * 2);
                            kinds = Arrays.copyOf(kinds, size * 2);
                        }
                        String type = r.getType().name();
                        Integer index = types.get(type);
                        if (index == null) {
                            index = types.size();
                            types.put(type, index);
                        }
                        boolean outgoing = r.getStartNodeId() == nodes[i];
                        neighbours[size] = other;
                        kinds[size] = index << 1 | (outgoing ? 1 : 0);
                        size++;
                    }
                }
            }
            offsets[i + 1] = size;
        }
        String[] typeNames = new String[types.size()];
        types.forEach((name, index) -> typeNames[index] = name);
        return new Adjacency(stamp, true, nodes, rows, offsets, Arrays.copyOf(neighbours, size),
                Arrays.copyOf(kinds, size), typeNames);
    }

    private static Adjacency unusable(long stamp) {
        return new Adjacency(stamp, false, new long[0], new LongIntMap(1), new int[1], new int[0], new int[0],
                new String[0]);
    }

    /** The node with this internal id, or null when it is gone. */
    @SuppressWarnings("deprecation")
    static Node nodeById(Transaction tx, long internalId) {
        try {
            return tx.getNodeById(internalId);
        } catch (org.neo4j.graphdb.NotFoundException gone) {
            return null;
        }
    }

    /** The row of the node with this internal id; {@link LongIntMap#ABSENT} when it is not in the copy. */
    int row(long internalId) {
        return rows.get(internalId);
    }

    /**
     * Each row's row in {@code index} ({@link LongIntMap#ABSENT} where the node is not in it),
     * looked up once per index: a hash lookup per neighbour met took a sixth of a hop's time.
     */
    int[] seedRows(SeedIndex index) {
        SeedRows known = seedRows;
        if (known != null && known.index() == index) {
            return known.rows();
        }
        int[] rows = new int[nodes.length];
        for (int r = 0; r < nodes.length; r++) {
            rows[r] = index.row(nodes[r]);
        }
        seedRows = new SeedRows(index, rows);
        return rows;
    }

    long node(int row) {
        return nodes[row];
    }

    /** The number of rows: the label's nodes when the copy was read. */
    int size() {
        return nodes.length;
    }

    int start(int row) {
        return offsets[row];
    }

    int stop(int row) {
        return offsets[row + 1];
    }

    int neighbour(int end) {
        return neighbours[end];
    }

    int type(int end) {
        return kinds[end] >>> 1;
    }

    boolean outgoing(int end) {
        return (kinds[end] & 1) != 0;
    }

    String typeName(int type) {
        return typeNames[type];
    }

    /** sim(q, r) by type index, from the caller's map by type name (a type missing counts 0). */
    double[] relationSimilarity(Map<String, Double> byName) {
        double[] out = new double[typeNames.length];
        for (int t = 0; t < typeNames.length; t++) {
            out[t] = byName.getOrDefault(typeNames[t], 0.0);
        }
        return out;
    }
}
