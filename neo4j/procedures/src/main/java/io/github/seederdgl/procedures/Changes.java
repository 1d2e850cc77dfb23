package io.github.seederdgl.procedures;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.neo4j.common.DependencyResolver;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Node;
import org.neo4j.graphdb.Transaction;
import org.neo4j.graphdb.event.PropertyEntry;
import org.neo4j.graphdb.event.TransactionData;
import org.neo4j.graphdb.event.TransactionEventListener;
import org.neo4j.procedure.Context;
import org.neo4j.procedure.Description;
import org.neo4j.procedure.Mode;
import org.neo4j.procedure.Procedure;

/**
 * A counter per database that moves whenever a committed write can change what K-hop walks:
 * relationships created or deleted, nodes created or deleted, labels added or removed. Property
 * writes do not move it (sketches carry their own version, and the properties scores come from
 * have the counter below). {@link Adjacency} keeps a copy of a dataset's relationships only while the counter
 * stands where it stood when the copy was read.
 *
 * <p>The counter comes from a transaction event listener, which only the server's
 * {@code DatabaseManagementService} registers; a procedure reaches that service through the
 * {@code DependencyResolver} component, which the server hands only to procedures it lets out of
 * its sandbox ({@code dbms.security.procedures.unrestricted=seeder.trackChanges}, which
 * {@code seeder-dgl neo4j start} and docker-compose.yml set). That one component is the only
 * server-internal interface the plugin touches, and only in this class: where the server keeps
 * the procedure sandboxed, {@code seeder.trackChanges} fails to load, {@link #counter} stays
 * null, and K-hop walks the store as before.
 *
 * <p>A second counter per database moves whenever a committed write sets or removes a node property
 * under one of the keys {@link #watch watched} there: {@link NodeCopy} keeps the ids, embeddings,
 * types and names of a dataset's nodes only while it stands. Until a key is watched, no write's
 * properties are looked at.
 *
 * <p>Each counter moves twice per write: before the commit, so that a copy read from then on is
 * not trusted until it is read again, and after it, so that a copy read while the commit was
 * being applied (which may have seen part of it) is not trusted either.
 */
public class Changes {
    @Context
    public DependencyResolver resolver;

    @Context
    public GraphDatabaseService db;

    private static final ConcurrentHashMap<String, AtomicLong> COUNTERS = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<String, AtomicLong> PROPERTY_COUNTERS = new ConcurrentHashMap<>();
    /** Per database, the node property keys whose writes move its property counter. */
    private static final ConcurrentHashMap<String, Set<String>> WATCHED = new ConcurrentHashMap<>();
    /** beforeCommit's verdict, for afterCommit: which counters the write moved. */
    private static final int WALKED = 1;
    private static final int PROPERTIES = 2;

    public static class Tracking {
        public boolean tracking;

        Tracking(boolean tracking) {
            this.tracking = tracking;
        }
    }

    @Procedure(name = "seeder.trackChanges", mode = Mode.READ)
    @Description("seeder.trackChanges(): counts, from now on, the writes to this database that can change "
            + "what seeder.khop walks (relationships, nodes and labels created or removed), so that seeder.khop "
            + "may keep a copy of a dataset's relationships between writes; needs "
            + "dbms.security.procedures.unrestricted=seeder.trackChanges. Called by seeder.khop itself.")
    public Stream<Tracking> trackChanges() {
        String name = db.databaseName();
        COUNTERS.computeIfAbsent(name, key -> {
            AtomicLong counter = new AtomicLong();
            AtomicLong properties = PROPERTY_COUNTERS.computeIfAbsent(key, k -> new AtomicLong());
            Set<String> watched = WATCHED.computeIfAbsent(key, k -> ConcurrentHashMap.newKeySet());
            resolver.resolveDependency(DatabaseManagementService.class)
                    .registerTransactionEventListener(key, new Listener(counter, properties, watched));
            return counter;
        });
        return Stream.of(new Tracking(true));
    }

    /** The database's counter; null until {@code seeder.trackChanges} ran there (or where it cannot). */
    static AtomicLong counter(String database) {
        return COUNTERS.get(database);
    }

    /** The database's property counter; null until {@code seeder.trackChanges} ran there. */
    static AtomicLong propertyCounter(String database) {
        return PROPERTY_COUNTERS.get(database);
    }

    /** From now on, writes of these node property keys in the database move its property counter.
     * A copy read under the counter must be read after this call: a write committed before it was
     * not counted. */
    static void watch(String database, String... keys) {
        Set<String> watched = WATCHED.computeIfAbsent(database, k -> ConcurrentHashMap.newKeySet());
        for (String key : keys) {
            watched.add(key);
        }
    }

    private static final class Listener implements TransactionEventListener<Integer> {
        private final AtomicLong counter;
        private final AtomicLong properties;
        private final Set<String> watched;

        Listener(AtomicLong counter, AtomicLong properties, Set<String> watched) {
            this.counter = counter;
            this.properties = properties;
            this.watched = watched;
        }

        @Override
        public Integer beforeCommit(TransactionData data, Transaction transaction, GraphDatabaseService database) {
            boolean walked = data.createdRelationships().iterator().hasNext()
                    || data.deletedRelationships().iterator().hasNext()
                    || data.createdNodes().iterator().hasNext()
                    || data.deletedNodes().iterator().hasNext()
                    || data.assignedLabels().iterator().hasNext()
                    || data.removedLabels().iterator().hasNext();
            boolean written = !watched.isEmpty()
                    && (touches(data.assignedNodeProperties()) || touches(data.removedNodeProperties()));
            int moved = (walked ? WALKED : 0) | (written ? PROPERTIES : 0);
            move(moved);
            return moved;
        }

        private boolean touches(Iterable<PropertyEntry<Node>> entries) {
            for (PropertyEntry<Node> entry : entries) {
                if (watched.contains(entry.key())) {
                    return true;
                }
            }
            return false;
        }

        private void move(int moved) {
            if ((moved & WALKED) != 0) {
                counter.incrementAndGet();
            }
            if ((moved & PROPERTIES) != 0) {
                properties.incrementAndGet();
            }
        }

        @Override
        public void afterCommit(TransactionData data, Integer moved, GraphDatabaseService database) {
            int now = moved == null ? 0 : moved;
            // A key first watched while this write was committing: counted now, so that a copy read
            // since (which may have seen part of the write) is not trusted.
            if ((now & PROPERTIES) == 0 && !watched.isEmpty()
                    && (touches(data.assignedNodeProperties()) || touches(data.removedNodeProperties()))) {
                now |= PROPERTIES;
            }
            move(now);
        }

        @Override
        public void afterRollback(TransactionData data, Integer moved, GraphDatabaseService database) {
            // Nothing changed: a copy read under the counter raised before the commit shows the
            // graph as it still is, and stays valid.
        }
    }
}
