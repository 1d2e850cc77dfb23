package io.github.seederdgl.procedures;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.Arrays;
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
    /** From this many neighbours on, a hop on the copy bounds them over {@link #BOUND_CHUNKS} cores. */
    private static final int PARALLEL_BOUNDS = 4096;
    private static final int BOUND_CHUNKS = Math.min(Runtime.getRuntime().availableProcessors(), 8);

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
        /** What was walked: "copy" (the in-memory copy of the relationships, {@link Adjacency}) or "store". */
        public String walked = "store";
        /** Where the neighbours' bounds came from: "index" ({@link SeedIndex}) or "store" (each
         * neighbour's own sketch, read or cached). */
        public String bounds = "store";
        /** Where survivors' exact scores and the selected nodes' features came from: "copy" (the in-memory
         * copy of the nodes' ids, embeddings, types and names, {@link NodeCopy}) or "store". */
        public String scored = "store";
        /** With config {@code features}: the ids of all selected nodes (seeds first), and their
         * embeddings (little-endian float32 rows), types and names, as seeder.nodeFeatures gives them. */
        public List<Long> featureIds = new ArrayList<>();
        public byte[] embeddings = new byte[0];
        public List<String> types = new ArrayList<>();
        public List<String> names = new ArrayList<>();
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

    /** Embeddings, types and names of nodes, row by row, packed as seeder.nodeFeatures sends them. */
    private static final class FeatureRows {
        final List<Long> ids = new ArrayList<>();
        final List<String> types = new ArrayList<>();
        final List<String> names = new ArrayList<>();
        private final List<float[]> rows = new ArrayList<>();
        private final Scoring.Properties properties;
        private int dimension = -1;

        FeatureRows(Scoring.Properties properties) {
            this.properties = properties;
        }

        /** The node with dataset id {@code id}, from its properties as read (embedding, type and name among them). */
        void add(long id, Map<String, Object> stored) {
            // A name property of the user's (adopted in place) may hold a number or be missing: sent
            // as text, "" for none, as cypher/retrieval/node_features.cypher does.
            Object name = stored.get(properties.name);
            add(id, asFloats(stored.get(properties.embedding), id), (String) stored.get(properties.type),
                    name == null ? "" : name.toString());
        }

        void add(long id, float[] row, String type, String name) {
            if (dimension < 0) {
                dimension = row.length;
            } else if (row.length != dimension) {
                throw new IllegalArgumentException("node " + id + " has a " + row.length
                        + "-dimensional embedding, the nodes before it " + dimension);
            }
            rows.add(row);
            ids.add(id);
            types.add(type);
            names.add(name);
        }

        byte[] embeddings() {
            ByteBuffer buffer = ByteBuffer.allocate(rows.size() * Math.max(dimension, 0) * Float.BYTES)
                    .order(ByteOrder.LITTLE_ENDIAN);
            FloatBuffer floats = buffer.asFloatBuffer();  // a view: writes through, in the buffer's byte order
            rows.forEach(floats::put);
            return buffer.array();
        }

        void into(Expansion out) {
            out.featureIds = ids;
            out.embeddings = embeddings();
            out.types = types;
            out.names = names;
        }
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
        final long nodeId;
        double best = Double.NEGATIVE_INFINITY;
        double via;
        double high;
        double similarity;
        double score;
        long id;
        /** The properties read for its exact score (id and embedding; with features, a picked node's type
         * and name are added after the budget cut). */
        Map<String, Object> stored;
        private Boolean inDataset;

        Candidate(Node node, long nodeId) {
            this.node = node;
            this.nodeId = nodeId;
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
            + "are kept for later calls with the same version; null: none kept), seed_index and simd as for "
            + "seeder.exactSeeds (neighbours bounded from the in-memory copy of the sketches; the same result), "
            + "seed_index_wait (default false: while that copy is missing or being built, bound from the store and "
            + "build it in the background), "
            + "adjacency (default true: walk an in-memory copy of the relationships while no write changed them) and "
            + "adjacency_wait (default false), node_copy (default true: on that copy, score survivors from an "
            + "in-memory copy of the nodes' ids, embeddings, types and names while no write changed them) and "
            + "node_copy_wait (default false), features (default false: also the embeddings, types and names of the "
            + "selected nodes, as seeder.nodeFeatures gives them)")
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

        // The dataset's sketches side by side (see SeedIndex), when the record has a version: a
        // neighbour's bound is then one lookup and one sum in SIMD lanes instead of a map lookup
        // and a scalar sum; a neighbour not in it (another label, or created since) is bounded as before.
        SeedIndex index = SeedIndex.of(db, dataset, properties, () -> labelCount(dataset), tx, guard,
                properties.seedIndexWait);
        if (index != null && index.dimension > 0) {
            scoring.checkDimension(index.dimension);
        }

        String bounds = index != null && index.dimension > 0 ? "index" : "store";
        if (properties.adjacency) {
            Adjacency copy = Adjacency.current(db, tx, dataset, properties, properties.adjacencyWait);
            Expansion walked = copy == null ? null : khopFromCopy(copy, index, dataset, properties, scoring, seeds,
                    budgets, relationSimilarity, withEdges);
            if (walked != null) {
                walked.bounds = bounds;
                return Stream.of(walked);
            }
        }

        // Selected nodes (internal id -> position) and their dataset ids, in selection order.
        LongIntMap selected = new LongIntMap(256);
        List<Node> selectedNodes = new ArrayList<>();
        List<Long> selectedIds = new ArrayList<>();
        List<Node> frontier = new ArrayList<>();
        List<Double> frontierSim = new ArrayList<>();
        for (Map<String, Object> seed : seeds) {
            Object id = seed.get("id");
            Node node = tx.findNode(dataset, properties.id, id);
            // A seed that is gone (deleted since seeding) has no neighbours; a repeated one adds nothing.
            if (node != null && select(selected, selectedNodes, selectedIds, node, ((Number) id).longValue())) {
                frontier.add(node);
                frontierSim.add(((Number) seed.get("similarity")).doubleValue());
            }
        }
        int seedCount = selectedNodes.size();
        Map<Long, Map<String, Object>> pickedStored = new LinkedHashMap<>();  // features, in selection order
        Expansion out = new Expansion();
        out.bounds = bounds;
        for (int hop = 1; hop <= budgets.size(); hop++) {
            long budget = budgets.get(hop - 1);
            if (frontier.isEmpty() || budget <= 0) {
                break;
            }
            // sim(q, r) for this hop: a type missing from the map counts 0, as in the Cypher statement.
            Map<String, Double> relation = new HashMap<>();
            relationSimilarity.get(hop - 1).forEach((type, sim) -> relation.put(type, ((Number) sim).doubleValue()));
            List<Candidate> picked = hop(dataset, properties, scoring, index, relation, selected, frontier,
                    frontierSim, (int) Math.min(budget, Integer.MAX_VALUE));
            frontier = new ArrayList<>(picked.size());
            frontierSim = new ArrayList<>(picked.size());
            for (Candidate c : picked) {
                select(selected, selectedNodes, selectedIds, c.node, c.id);
                if (properties.features) {
                    pickedStored.put(c.id, labelled(c.node, c.stored, properties));
                }
                frontier.add(c.node);
                frontierSim.add(c.similarity);
                out.ids.add(c.id);
                out.hops.add((long) hop);
                out.similarities.add(c.similarity);
                out.scores.add(c.score);
            }
        }
        if (properties.features) {
            FeatureRows rows = new FeatureRows(properties);
            for (int s = 0; s < seedCount; s++) {
                rows.add(selectedIds.get(s), selectedNodes.get(s).getProperties(properties.scoredKeys()));
            }
            pickedStored.forEach((id, stored) -> rows.add(id, stored));
            rows.into(out);
        }
        if (withEdges) {
            for (int s = 0; s < selectedNodes.size(); s++) {
                try (ResourceIterable<Relationship> stored = properties.relationships(selectedNodes.get(s),
                        Direction.OUTGOING)) {
                    for (Relationship r : stored) {
                        int target = selected.get(r.getEndNodeId());
                        if (target != LongIntMap.ABSENT) {
                            out.sources.add(selectedIds.get(s));
                            out.targets.add(selectedIds.get(target));
                            out.relations.add(r.getType().name());
                        }
                    }
                }
            }
        }
        return Stream.of(out);
    }

    /**
     * {@link #khop} over the in-memory copy of the relationships: the same hops, bounds, exact
     * scores and order, with each neighbour two array reads instead of a relationship record. Every
     * node in the copy has the dataset's label (the copy is valid only while no label, node or
     * relationship was written), so none is checked on the way; each survivor is scored from
     * {@link NodeCopy} while no write changed the nodes' properties, else found in the store and
     * scored from its stored embedding. Null when a node is not where the copy says, or a write
     * landed during this call: the caller walks the store instead.
     */
    private Expansion khopFromCopy(Adjacency copy, SeedIndex index, Label dataset, Scoring.Properties properties,
                                   Scoring scoring, List<Map<String, Object>> seeds, List<Long> budgets,
                                   List<Map<String, Object>> relationSimilarity, boolean withEdges) {
        LongIntMap selected = new LongIntMap(256);  // row -> position in selection order
        int[] selectedRows = new int[16];
        List<Long> selectedIds = new ArrayList<>();
        int[] frontier = new int[16];
        double[] frontierSim = new double[16];
        int width = 0;
        for (Map<String, Object> seed : seeds) {
            Object id = seed.get("id");
            Node node = tx.findNode(dataset, properties.id, id);
            if (node == null) {
                continue;  // gone since seeding: no neighbours
            }
            int row = copy.row(Scoring.nodeKey(node));
            if (row == LongIntMap.ABSENT) {
                return null;
            }
            if (selected.putIfAbsent(row, selectedIds.size()) == selectedIds.size()) {
                selectedRows = append(selectedRows, selectedIds.size(), row);
                selectedIds.add(((Number) id).longValue());
                frontier = append(frontier, width, row);
                frontierSim = append(frontierSim, width, ((Number) seed.get("similarity")).doubleValue());
                width++;
            }
        }
        // Survivors scored, and features read, from the copy of the nodes while it is valid.
        NodeCopy values = properties.nodeCopy
                ? NodeCopy.current(db, tx, copy, dataset, properties, properties.nodeCopyWait) : null;
        if (values != null && values.dimension > 0) {
            scoring.checkDimension(values.dimension);
        }
        FeatureRows rows = properties.features ? new FeatureRows(properties) : null;
        if (rows != null) {
            for (int s = 0; s < selectedIds.size(); s++) {
                if (!addFeatures(rows, values, copy, selectedRows[s], selectedIds.get(s), null, null, properties)) {
                    return null;
                }
            }
        }
        Expansion out = new Expansion();
        out.walked = "copy";
        out.scored = values != null ? "copy" : "store";
        double[] bounds = new double[2];
        long[] id = new long[1];
        for (int hop = 1; hop <= budgets.size(); hop++) {
            long budgetGiven = budgets.get(hop - 1);
            if (width == 0 || budgetGiven <= 0) {
                break;
            }
            int budget = (int) Math.min(budgetGiven, Integer.MAX_VALUE);
            Map<String, Double> byName = new HashMap<>();
            relationSimilarity.get(hop - 1).forEach((type, sim) -> byName.put(type, ((Number) sim).doubleValue()));
            double[] relation = copy.relationSimilarity(byName);

            // Every unselected neighbour of the frontier, and its best frontier term.
            LongIntMap met = new LongIntMap(1024);
            int[] candidates = new int[1024];
            double[] best = new double[1024];
            int count = 0;
            for (int f = 0; f < width; f++) {
                int v = frontier[f];
                double sim = frontierSim[f];
                guard.check();
                for (int e = copy.start(v), stop = copy.stop(v); e < stop; e++) {
                    int u = copy.neighbour(e);
                    if (selected.containsKey(u)) {
                        continue;
                    }
                    double term = sim + relation[copy.type(e)];
                    int at = met.putIfAbsent(u, count);
                    if (at == count) {
                        candidates = append(candidates, count, u);
                        best = append(best, count, term);
                        count++;
                    } else if (term > best[at]) {
                        best[at] = term;
                    }
                }
            }
            // Pass 1: bounds, as in hop(): from the in-memory sketches (over the cores when there
            // are many: no store read happens there), then from the store for nodes not in them.
            double[] low = new double[count];
            double[] high = new double[count];
            boolean[] stored = new boolean[count];
            if (index != null) {
                boundFromIndex(index, copy.seedRows(index), candidates, count, scoring, properties.simd, low, high,
                        stored);
            } else {
                Arrays.fill(stored, 0, count, true);
            }
            Scoring.KthLargest lows = new Scoring.KthLargest(budget);
            for (int c = 0; c < count; c++) {
                if (stored[c]) {
                    Node node = Adjacency.nodeById(tx, copy.node(candidates[c]));
                    if (node == null) {
                        return null;
                    }
                    scoring.bound(node, bounds);
                    low[c] = bounds[0];
                    high[c] = bounds[1];
                }
                double via = best[c] / 3.0;
                lows.offer(via + low[c] / 3.0);
                high[c] = via + high[c] / 3.0;
            }
            double threshold = lows.value();
            List<Candidate> survivors = new ArrayList<>();
            for (int c = 0; c < count; c++) {
                if (high[c] >= threshold) {
                    guard.check();
                    int row = candidates[c];
                    Candidate candidate;
                    if (values != null && values.kind(row) != NodeCopy.STORE) {
                        // In the copy: every row there has the dataset's label (see Adjacency).
                        candidate = new Candidate(null, row);
                        candidate.similarity = values.similarity(row, scoring);
                        candidate.id = values.id(row);
                    } else {
                        Node node = Adjacency.nodeById(tx, copy.node(row));
                        if (node == null || !node.hasLabel(dataset)) {
                            return null;
                        }
                        candidate = new Candidate(node, row);
                        candidate.stored = node.getProperties(properties.exactKeys());
                        candidate.similarity = scoring.exact(candidate.stored, id);
                        candidate.id = id[0];
                    }
                    candidate.via = best[c] / 3.0;
                    candidate.score = candidate.similarity / 3.0 + candidate.via;
                    survivors.add(candidate);
                }
            }
            survivors.sort(Comparator.comparingDouble((Candidate c) -> -c.score).thenComparingLong(c -> c.id));
            List<Candidate> picked = survivors.size() > budget ? survivors.subList(0, budget) : survivors;
            width = 0;
            for (Candidate c : picked) {
                int row = (int) c.nodeId;  // the row, here
                selected.putIfAbsent(row, selectedIds.size());
                selectedRows = append(selectedRows, selectedIds.size(), row);
                selectedIds.add(c.id);
                frontier = append(frontier, width, row);
                frontierSim = append(frontierSim, width, c.similarity);
                width++;
                out.ids.add(c.id);
                out.hops.add((long) hop);
                out.similarities.add(c.similarity);
                out.scores.add(c.score);
                if (rows != null && !addFeatures(rows, values, copy, row, c.id, c.node, c.stored, properties)) {
                    return null;
                }
            }
        }
        // A write during this call that the copies do not show: the store decides.
        if (values != null && !values.stillCurrent(db)) {
            return null;
        }
        if (rows != null) {
            rows.into(out);
        }
        if (withEdges) {
            for (int s = 0; s < selectedIds.size(); s++) {
                int v = selectedRows[s];
                for (int e = copy.start(v), stop = copy.stop(v); e < stop; e++) {
                    if (copy.outgoing(e)) {
                        int target = selected.get(copy.neighbour(e));
                        if (target != LongIntMap.ABSENT) {
                            out.sources.add(selectedIds.get(s));
                            out.targets.add(selectedIds.get(target));
                            out.relations.add(copy.typeName(copy.type(e)));
                        }
                    }
                }
            }
        }
        return out;
    }

    /** Bounds of candidates {@code 0..count-1} (rows of the copy) from the index's sketches, split
     * over the cores when there are many; {@code stored[c]} marks those the index does not hold. */
    private static void boundFromIndex(SeedIndex index, int[] seedRows, int[] candidates, int count, Scoring scoring,
                                       boolean simd, double[] low, double[] high, boolean[] stored) {
        SeedIndex.split(count, count < PARALLEL_BOUNDS ? 1 : BOUND_CHUNKS, (chunk, start, stop) -> {
            double[] bounds = new double[2];
            for (int c = start; c < stop; c++) {
                int row = seedRows[candidates[c]];
                if (row == LongIntMap.ABSENT) {
                    stored[c] = true;
                } else {
                    index.bound(row, scoring, simd, bounds);
                    low[c] = bounds[0];
                    high[c] = bounds[1];
                }
            }
        });
    }

    /**
     * Adds the features of row {@code row} of the relationships' copy: from the node copy when it
     * holds the row's embedding, else from the store ({@code node} and {@code stored}: what was read
     * for its score, when it was; null: read now). False when the node is gone.
     */
    private boolean addFeatures(FeatureRows rows, NodeCopy values, Adjacency copy, int row, long id, Node node,
                                Map<String, Object> stored, Scoring.Properties properties) {
        if (values != null && values.kind(row) == NodeCopy.FLOATS) {
            rows.add(id, values.embedding(row), values.type(row), values.name(row));
            return true;
        }
        if (node == null) {
            node = Adjacency.nodeById(tx, copy.node(row));
            if (node == null) {
                return false;
            }
        }
        rows.add(id, stored == null ? node.getProperties(properties.scoredKeys()) : labelled(node, stored, properties));
        return true;
    }

    /** {@code stored} (a picked node's {@link Scoring.Properties#exactKeys}) with the node's type and name. */
    private static Map<String, Object> labelled(Node node, Map<String, Object> stored, Scoring.Properties properties) {
        Map<String, Object> out = new HashMap<>(stored);
        out.putAll(node.getProperties(properties.labelKeys()));
        return out;
    }

    static int[] append(int[] values, int size, int value) {
        int[] out = size < values.length ? values : Arrays.copyOf(values, values.length * 2);
        out[size] = value;
        return out;
    }

    private static double[] append(double[] values, int size, double value) {
        double[] out = size < values.length ? values : Arrays.copyOf(values, values.length * 2);
        out[size] = value;
        return out;
    }

    /** Adds {@code node} to the selection unless it is there; whether it was added. */
    private static boolean select(LongIntMap selected, List<Node> nodes, List<Long> ids, Node node, long id) {
        if (selected.putIfAbsent(Scoring.nodeKey(node), nodes.size()) != nodes.size()) {
            return false;
        }
        nodes.add(node);
        ids.add(id);
        return true;
    }

    /** The best {@code budget} neighbours of the frontier that are not selected yet, ranked. */
    private List<Candidate> hop(Label dataset, Scoring.Properties properties, Scoring scoring, SeedIndex index,
                                Map<String, Double> relation, LongIntMap selected,
                                List<Node> frontier, List<Double> frontierSim, int budget) {
        LongIntMap met = new LongIntMap(1024);
        List<Candidate> candidates = new ArrayList<>();
        for (int f = 0; f < frontier.size(); f++) {
            Node v = frontier.get(f);
            long vId = Scoring.nodeKey(v);
            double sim = frontierSim.get(f);
            try (ResourceIterable<Relationship> edges = properties.relationships(v, Direction.BOTH)) {
                for (Relationship r : edges) {
                    guard.check();
                    long uId = r.getOtherNodeId(vId);
                    if (selected.containsKey(uId)) {
                        continue;
                    }
                    int at = met.putIfAbsent(uId, candidates.size());
                    Candidate c;
                    if (at == candidates.size()) {
                        c = new Candidate(r.getOtherNode(v), uId);
                        candidates.add(c);
                    } else {
                        c = candidates.get(at);
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
            int row = index == null ? LongIntMap.ABSENT : index.row(c.nodeId);
            if (row != LongIntMap.ABSENT) {
                index.bound(row, scoring, properties.simd, bounds);
            } else {
                scoring.bound(c.node, bounds);
            }
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
                c.stored = c.node.getProperties(properties.exactKeys());
                c.similarity = scoring.exact(c.stored, id);
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
            + "the server can; false reads every node from the store, or sums in scalar code), candidates (default 0: "
            + "every node; n > 0: only the ~n nodes a scan of one sign bit a dimension finds nearest are scored, "
            + "for datasets of millions of nodes, where the full scan is bound by memory bandwidth)")
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
        SeedIndex index = SeedIndex.of(db, dataset, properties, () -> labelCount(dataset), tx, guard, true);
        int[] rows = index != null && properties.candidates > 0
                ? index.preselect(scoring, Math.max(properties.candidates, limit), properties.preselectGuess) : null;
        List<Seed> found = index != null ? indexedSeeds(index, dataset, scoring, properties.simd, limit, rows)
                : storeSeeds(dataset, scoring, limit);
        found.sort(Comparator.comparingDouble((Seed s) -> -s.similarity).thenComparingLong(s -> s.id));
        return found.stream().limit(limit);
    }

    /** Exact seeding from the flat sketches of {@link SeedIndex}: bounds in one pass over arrays (over
     * every row, or the rows {@code rows} lists), then the survivors found again in the store (still
     * there, still in the dataset) and scored exactly. */
    private List<Seed> indexedSeeds(SeedIndex index, Label dataset, Scoring scoring, boolean simd, int limit,
                                    int[] rows) {
        int n = rows == null ? index.size() : rows.length;
        double[] approx = rows == null ? index.borrowRowValues() : new double[n];
        double[] width = rows == null ? index.borrowRowValues() : new double[n];
        try {
            return indexedSeeds(index, dataset, scoring, simd, limit, rows, approx, width);
        } finally {
            index.giveBack(approx);
            index.giveBack(width);
        }
    }

    private List<Seed> indexedSeeds(SeedIndex index, Label dataset, Scoring scoring, boolean simd, int limit,
                                    int[] rows, double[] approx, double[] width) {
        int n = rows == null ? index.size() : rows.length;
        index.bounds(scoring, simd, rows, approx, width);
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
                Node node = Adjacency.nodeById(tx, index.node(rows == null ? i : rows[i]));
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
        return SeedIndex.labelCount(tx, dataset);
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
        FeatureRows rows = new FeatureRows(properties);
        for (Long id : ids) {
            guard.check();
            if (id == null) {
                throw new IllegalArgumentException("the node ids hold a null");
            }
            Node node = tx.findNode(dataset, properties.id, id);
            if (node != null) {
                rows.add(id, node.getProperties(properties.embedding, properties.type, properties.name));
            }
        }
        Features out = new Features();
        out.ids = rows.ids;
        out.embeddings = rows.embeddings();
        out.types = rows.types;
        out.names = rows.names;
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
