package io.github.seederdgl.procedures;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.neo4j.common.DependencyResolver;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Transaction;
import org.neo4j.graphdb.event.TransactionData;
import org.neo4j.graphdb.event.TransactionEventListener;
import org.neo4j.procedure.Context;
import org.neo4j.procedure.Description;
import org.neo4j.procedure.Mode;
import org.neo4j.procedure.Procedure;

/**
 * A counter per database that moves whenever a committed write can change what K-hop walks:
 * relationships created or deleted, nodes created or deleted, labels added or removed. Property
 * writes do not move it (K-hop reads every score from the store, and sketches carry their own
 * version). {@link Adjacency} keeps a copy of a dataset's relationships only while the counter
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
 * <p>The counter moves twice per write: before the commit, so that a copy read from then on is
 * not trusted until it is read again, and after it, so that a copy read while the commit was
 * being applied (which may have seen part of it) is not trusted either.
 */
public class Changes {
    @Context
    public DependencyResolver resolver;

    @Context
    public GraphDatabaseService db;

    private static final ConcurrentHashMap<String, AtomicLong> COUNTERS = new ConcurrentHashMap<>();

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
            resolver.resolveDependency(DatabaseManagementService.class)
                    .registerTransactionEventListener(key, new Listener(counter));
            return counter;
        });
        return Stream.of(new Tracking(true));
    }

    /** The database's counter; null until {@code seeder.trackChanges} ran there (or where it cannot). */
    static AtomicLong counter(String database) {
        return COUNTERS.get(database);
    }

    private static final class Listener implements TransactionEventListener<Boolean> {
        private final AtomicLong counter;

        Listener(AtomicLong counter) {
            this.counter = counter;
        }

        @Override
        public Boolean beforeCommit(TransactionData data, Transaction transaction, GraphDatabaseService database) {
            boolean walked = data.createdRelationships().iterator().hasNext()
                    || data.deletedRelationships().iterator().hasNext()
                    || data.createdNodes().iterator().hasNext()
                    || data.deletedNodes().iterator().hasNext()
                    || data.assignedLabels().iterator().hasNext()
                    || data.removedLabels().iterator().hasNext();
            if (walked) {
                counter.incrementAndGet();
            }
            return walked;
        }

        @Override
        public void afterCommit(TransactionData data, Boolean walked, GraphDatabaseService database) {
            if (Boolean.TRUE.equals(walked)) {
                counter.incrementAndGet();
            }
        }

        @Override
        public void afterRollback(TransactionData data, Boolean walked, GraphDatabaseService database) {
            // Nothing changed: a copy read under the counter raised before the commit shows the
            // graph as it still is, and stays valid.
        }
    }
}
