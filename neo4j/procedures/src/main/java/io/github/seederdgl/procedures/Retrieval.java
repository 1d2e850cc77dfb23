package io.github.seederdgl.procedures;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.neo4j.graphdb.Direction;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Label;
import org.neo4j.graphdb.Node;
import org.neo4j.graphdb.Relationship;
import org.neo4j.graphdb.ResourceIterable;
import org.neo4j.graphdb.ResourceIterator;
import org.neo4j.graphdb.Transaction;
import org.neo4j.procedure.Context;
import org.neo4j.procedure.Description;
import org.neo4j.procedure.Mode;
import org.neo4j.procedure.Name;
import org.neo4j.procedure.Procedure;
import org.neo4j.procedure.TerminationGuard;

/**
 * seeder-dgl's retrieval inside Neo4j: K-hop-with-filtering for all hops in one call, and exact
 * dense seeding. Called through cypher/procedure/*.cypher by seeder_dgl/graphstore/live.py.
 *
 * <p>Through Cypher a K-hop costs one query per hop, and Cypher evaluates every candidate through
 * its expression engine; here the hops run back to back in one transaction, followed by the
 * relationships among the selected nodes (another query on the Cypher path), and only those
 * leave the database. The numbers are the in-memory reference's
 * (seeder_dgl/retrieval/memory.py), in double: sim(q, u) as {@link Scoring} computes it,
 * {@code via(u) = max over frontier edges v-r-u of (sim(q,v) + sim(q,r)) / 3.0},
 * {@code score(u) = sim(q,u) / 3.0 + via(u)}, ranked by score descending, then id ascending.
 */
public class Retrieval {
    @Context
    public Transaction tx;

    @Context
    public GraphDatabaseService db;

    @Context
    public TerminationGuard guard;

    /** What the hops added, in order, and the relationships among all selected nodes (seeds
     * included), each once as stored: one record of parallel lists (the driver reads one record of
     * lists much faster than a record per node). */
    public static class Expansion {
        public List<Long> ids = new ArrayList<>();
        public List<Long> hops = new ArrayList<>();
        public List<Double> similarities = new ArrayList<>();
        public List<Double> scores = new ArrayList<>();
        public List<Long> sources = new ArrayList<>();
        public List<Long> targets = new ArrayList<>();
        public List<String> relations = new ArrayList<>();
    }

    /** The nodes found among the ids asked for, in the order asked, and their embeddings as one
     * little-endian float32 matrix: a float list crosses the wire as 9 bytes a number (packstream
     * float64), and the driver builds a Python float for each, which costs more than the query. */
    public static class Features {
        public List<Long> ids = new ArrayList<>();
        public byte[] embeddings;
        public List<String> types = new ArrayList<>();
        public List<String> names = new ArrayList<>();
    }

    public static class Seed {
        public long id;
        public double similarity;

        Seed(long id, double similarity) {
            this.id = id;
            this.similarity = similarity;
        }
    }

    /** One node met by a hop: its best frontier term, then its bounds and exact numbers. */
    private static final class Candidate {
        final Node node;
        double best = Double.NEGATIVE_INFINITY;
        double via;
        double high;
        double similarity;
        double score;
        long id;
        private Boolean inDataset;

        Candidate(Node node) {
            this.node = node;
        }

        /** Whether the node has the dataset's label, read once and only when it matters: reading
         * it is another read of the node's record. */
        boolean inDataset(Label dataset) {
            if (inDataset == null) {
                inDataset = node.hasLabel(dataset);
            }
            return inDataset;
        }
    }

    @Procedure(name = "seeder.khop", mode = Mode.READ)
    @Description("seeder.khop(label, embedding, seeds [{id, similarity}], budgets, relationSimilarity "
            + "[{type: sim(q, r)}, one per hop], withEdges = true, config = {}): the nodes K-hop-with-filtering "
            + "adds to the seeds, hop by hop, and the relationships among all of them, as one record of lists; "
            + "config: property names {id, embedding, sketch, sketch_error, type, name}, types (a list of "
            + "relationship types to traverse, null: all) and sketch_version (the dataset record's: sketches read "
            + "are kept for later calls with the same version; null: none kept)")
    public Stream<Expansion> khop(@Name("label") String label, @Name("embedding") List<Double> embedding,
                                  @Name("seeds") List<Map<String, Object>> seeds,
                                  @Name("budgets") List<Long> budgets,
                                  @Name("relationSimilarity") List<Map<String, Object>> relationSimilarity,
                                  @Name(value = "withEdges", defaultValue = "true") boolean withEdges,
                                  @Name(value = "config", defaultValue = "{}") Map<String, Object> config) {
        Label dataset = datasetLabel(label);
        Scoring.Properties properties = new Scoring.Properties(config);
        Scoring scoring = new Scoring(embedding, properties, cache(label, properties));
        if (relationSimilarity.size() < budgets.size()) {
            throw new IllegalArgumentException("relationSimilarity needs one map per hop: " + budgets.size()
                    + " budgets, " + relationSimilarity.size() + " maps");
        }

        // Selected nodes and their ids, in selection order.
        Map<Node, Long> selected = new LinkedHashMap<>();
        List<Node> frontier = new ArrayList<>();
        List<Double> frontierSim = new ArrayList<>();
        for (Map<String, Object> seed : seeds) {
            Object id = seed.get("id");
            Node node = tx.findNode(dataset, properties.id, id);
            // A seed that is gone (deleted since seeding) has no neighbours; a repeated one adds nothing.
            if (node != null && selected.putIfAbsent(node, ((Number) id).longValue()) == null) {
                frontier.add(node);
                frontierSim.add(((Number) seed.get("similarity")).doubleValue());
            }
        }
        Expansion out = new Expansion();
        for (int hop = 1; hop <= budgets.size(); hop++) {
            long budget = budgets.get(hop - 1);
            if (frontier.isEmpty() || budget <= 0) {
                break;
            }
            // sim(q, r) for this hop: a type missing from the map counts 0, as in the Cypher statement.
            Map<String, Double> relation = new HashMap<>();
            relationSimilarity.get(hop - 1).forEach((type, sim) -> relation.put(type, ((Number) sim).doubleValue()));
            List<Candidate> picked = hop(dataset, properties, scoring, relation, selected, frontier, frontierSim,
                    (int) Math.min(budget, Integer.MAX_VALUE));
            frontier = new ArrayList<>(picked.size());
            frontierSim = new ArrayList<>(picked.size());
            for (Candidate c : picked) {
                selected.put(c.node, c.id);
                frontier.add(c.node);
                frontierSim.add(c.similarity);
                out.ids.add(c.id);
                out.hops.add((long) hop);
                out.similarities.add(c.similarity);
                out.scores.add(c.score);
            }
        }
        if (withEdges) {
            for (Map.Entry<Node, Long> source : selected.entrySet()) {
                try (ResourceIterable<Relationship> stored = properties.relationships(source.getKey(),
                        Direction.OUTGOING)) {
                    for (Relationship r : stored) {
                        Long target = selected.get(r.getEndNode());
                        if (target != null) {
                            out.sources.add(source.getValue());
                            out.targets.add(target);
                            out.relations.add(r.getType().name());
                        }
                    }
                }
            }
        }
        return Stream.of(out);
    }

    /** The best {@code budget} neighbours of the frontier that are not selected yet, ranked. */
    private List<Candidate> hop(Label dataset, Scoring.Properties properties, Scoring scoring,
                                Map<String, Double> relation, Map<Node, Long> selected,
                                List<Node> frontier, List<Double> frontierSim, int budget) {
        Map<Node, Candidate> met = new HashMap<>();
        List<Candidate> candidates = new ArrayList<>();
        for (int f = 0; f < frontier.size(); f++) {
            Node v = frontier.get(f);
            double sim = frontierSim.get(f);
            try (ResourceIterable<Relationship> edges = properties.relationships(v, Direction.BOTH)) {
                for (Relationship r : edges) {
                    guard.check();
                    Node u = r.getOtherNode(v);
                    if (selected.containsKey(u)) {
                        continue;
                    }
                    Candidate c = met.get(u);
                    if (c == null) {
                        c = new Candidate(u);
                        met.put(u, c);
                        candidates.add(c);
                    }
                    c.best = Math.max(c.best, sim + relation.getOrDefault(r.getType().name(), 0.0));
                }
            }
        }
        // Pass 1: bounds. Only a candidate whose upper bound reaches the budget-th best lower bound
        // of the dataset's nodes can be selected. A neighbour without the dataset's label (another
        // graph linked to this one) must not raise that bound, so the label is checked for each
        // lower bound that would move it, and for each survivor: a few of the candidates.
        Scoring.KthLargest lows = new Scoring.KthLargest(budget);
        List<Candidate> kept = new ArrayList<>();
        double[] bounds = new double[2];
        for (Candidate c : candidates) {
            c.via = c.best / 3.0;
            scoring.bound(c.node, bounds);
            double low = c.via + bounds[0] / 3.0;
            c.high = c.via + bounds[1] / 3.0;
            if (low > lows.value() && c.inDataset(dataset)) {
                lows.offer(low);
            }
            if (c.high >= lows.value()) {
                kept.add(c);
            }
        }
        // Pass 2: exact scores of the survivors.
        double threshold = lows.value();
        long[] id = new long[1];
        List<Candidate> survivors = new ArrayList<>();
        for (Candidate c : kept) {
            if (c.high >= threshold && c.inDataset(dataset)) {
                c.similarity = scoring.exact(c.node, id);
                c.id = id[0];
                c.score = c.similarity / 3.0 + c.via;
                survivors.add(c);
            }
        }
        survivors.sort(Comparator.comparingDouble((Candidate c) -> -c.score).thenComparingLong(c -> c.id));
        return survivors.size() > budget ? survivors.subList(0, budget) : survivors;
    }

    @Procedure(name = "seeder.exactSeeds", mode = Mode.READ)
    @Description("seeder.exactSeeds(label, embedding, k, config = {}): the k nodes of the label nearest to the "
            + "query by cosine over the stored embeddings, exactly (id, similarity), best first, ties by smaller "
            + "id; config: property names and sketch_version as for seeder.khop, seed_index and simd (both default "
            + "true: the dataset's sketches kept side by side in memory under the version, summed in SIMD lanes where "
            + "the server can; false reads every node from the store, or sums in scalar code)")
    public Stream<Seed> exactSeeds(@Name("label") String label, @Name("embedding") List<Double> embedding,
                                   @Name("k") long k,
                                   @Name(value = "config", defaultValue = "{}") Map<String, Object> config) {
        Label dataset = datasetLabel(label);
        Scoring.Properties properties = new Scoring.Properties(config);
        Scoring scoring = new Scoring(embedding, properties, cache(label, properties));
        if (k <= 0) {
            return Stream.empty();
        }
        int limit = (int) Math.min(k, Integer.MAX_VALUE);
        SeedIndex index = SeedIndex.of(db.databaseName(), dataset, properties, labelCount(dataset), tx, guard,
                cache(label, properties));
        List<Seed> found = index != null ? indexedSeeds(index, dataset, scoring, properties.simd, limit)
                : storeSeeds(dataset, scoring, limit);
        found.sort(Comparator.comparingDouble((Seed s) -> -s.similarity).thenComparingLong(s -> s.id));
        return found.stream().limit(limit);
    }

    /** Exact seeding from the flat sketches of {@link SeedIndex}: bounds in one pass over arrays, then
     * the survivors found again in the store (still there, still in the dataset) and scored exactly. */
    private List<Seed> indexedSeeds(SeedIndex index, Label dataset, Scoring scoring, boolean simd, int limit) {
        int n = index.size();
        double[] approx = new double[n];
        double[] width = new double[n];
        index.bounds(scoring, simd, approx, width);
        guard.check();
        Scoring.KthLargest lows = new Scoring.KthLargest(limit);
        for (int i = 0; i < n; i++) {
            lows.offer(approx[i] - width[i]);
        }
        // A node gone since the index was built could have raised that threshold: then the store
        // path, which reads what is there now, decides.
        double threshold = lows.value();
        long[] id = new long[1];
        List<Seed> found = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            if (approx[i] + width[i] >= threshold) {
                guard.check();
                Node node = nodeById(index.node(i));
                if (node == null || !node.hasLabel(dataset)) {
                    return storeSeeds(dataset, scoring, limit);
                }
                double similarity = scoring.exact(node, id);
                found.add(new Seed(id[0], similarity));
            }
        }
        return found;
    }

    /** Exact seeding over the nodes of the label as stored: each bounded by its sketch (kept by
     * {@link SketchCache}), the survivors scored from their embeddings. */
    private List<Seed> storeSeeds(Label dataset, Scoring scoring, int limit) {
        Scoring.KthLargest lows = new Scoring.KthLargest(limit);
        List<Node> kept = new ArrayList<>();
        List<Double> highs = new ArrayList<>();
        double[] bounds = new double[2];
        try (ResourceIterator<Node> nodes = tx.findNodes(dataset)) {
            while (nodes.hasNext()) {
                guard.check();
                Node node = nodes.next();
                scoring.bound(node, bounds);
                lows.offer(bounds[0]);
                if (bounds[1] >= lows.value()) {
                    kept.add(node);
                    highs.add(bounds[1]);
                }
            }
        }
        double threshold = lows.value();
        long[] id = new long[1];
        List<Seed> found = new ArrayList<>();
        for (int i = 0; i < kept.size(); i++) {
            if (highs.get(i) >= threshold) {
                double similarity = scoring.exact(kept.get(i), id);
                found.add(new Seed(id[0], similarity));
            }
        }
        return found;
    }

    /** The number of nodes with the label, from the count store (no scan). */
    private long labelCount(Label dataset) {
        String query = "MATCH (n:`" + dataset.name().replace("`", "``") + "`) RETURN count(n) AS count";
        try (var result = tx.execute(query)) {
            return ((Number) result.next().get("count")).longValue();
        }
    }

    /** The node with this internal id, or null when it is gone. */
    @SuppressWarnings("deprecation")
    private Node nodeById(long internalId) {
        try {
            return tx.getNodeById(internalId);
        } catch (org.neo4j.graphdb.NotFoundException gone) {
            return null;
        }
    }

    @Procedure(name = "seeder.nodeFeatures", mode = Mode.READ)
    @Description("seeder.nodeFeatures(label, ids, config = {}): the nodes of the label with these ids, in the "
            + "order given (missing ids absent), as one record: ids, embeddings (little-endian float32, row after "
            + "row), types, names; config: property names as for seeder.khop")
    public Stream<Features> nodeFeatures(@Name("label") String label, @Name("ids") List<Long> ids,
                                         @Name(value = "config", defaultValue = "{}") Map<String, Object> config) {
        Label dataset = datasetLabel(label);
        Scoring.Properties properties = new Scoring.Properties(config);
        if (ids == null) {
            throw new IllegalArgumentException("no node ids given");
        }
        Features out = new Features();
        List<float[]> rows = new ArrayList<>(ids.size());
        int dimension = -1;
        for (Long id : ids) {
            guard.check();
            if (id == null) {
                throw new IllegalArgumentException("the node ids hold a null");
            }
            Node node = tx.findNode(dataset, properties.id, id);
            if (node == null) {
                continue;
            }
            Map<String, Object> stored = node.getProperties(properties.embedding, properties.type, properties.name);
            float[] row = asFloats(stored.get(properties.embedding), id);
            if (dimension < 0) {
                dimension = row.length;
            } else if (row.length != dimension) {
                throw new IllegalArgumentException("node " + id + " has a " + row.length
                        + "-dimensional embedding, the nodes before it " + dimension);
            }
            rows.add(row);
            out.ids.add(id);
            out.types.add((String) stored.get(properties.type));
            // A name property of the user's (adopted in place) may hold a number or be missing: sent
            // as text, "" for none, as cypher/retrieval/node_features.cypher does.
            Object name = stored.get(properties.name);
            out.names.add(name == null ? "" : name.toString());
        }
        ByteBuffer buffer = ByteBuffer.allocate(rows.size() * Math.max(dimension, 0) * Float.BYTES)
                .order(ByteOrder.LITTLE_ENDIAN);
        FloatBuffer floats = buffer.asFloatBuffer();  // a view: writes through, in the buffer's byte order
        rows.forEach(floats::put);
        out.embeddings = buffer.array();
        return Stream.of(out);
    }

    /** A stored embedding as float32: a double list is rounded to nearest, as numpy's float32 cast
     * of the same numbers on the Cypher path does. */
    private static float[] asFloats(Object value, long id) {
        if (value instanceof float[]) {
            return (float[]) value;
        }
        if (value instanceof double[]) {
            double[] stored = (double[]) value;
            float[] row = new float[stored.length];
            for (int i = 0; i < stored.length; i++) {
                row[i] = (float) stored[i];
            }
            return row;
        }
        throw new IllegalArgumentException("node " + id + " has no embedding");
    }

    /** The sketches kept for this database, label and sketch property under the caller's sketch version. */
    private SketchCache.Generation cache(String label, Scoring.Properties properties) {
        return SketchCache.of(db.databaseName(), label, properties.sketch, properties.sketchVersion);
    }

    private static Label datasetLabel(String label) {
        if (label == null || label.isEmpty()) {
            throw new IllegalArgumentException("no dataset label given");
        }
        return Label.label(label);
    }
}
