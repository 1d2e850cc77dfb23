package io.github.seederdgl.procedures;

import java.util.concurrent.ConcurrentHashMap;

import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Transaction;

/**
 * Reads in-memory copies of a dataset ({@link Adjacency}, {@link NodeCopy}) in daemon threads: one
 * read at a time per key, and after a read whose copy went stale before it was done (a graph under
 * steady writes) the next waits that read's time, doubled for each stale read in a row, so that
 * reading copies that are never used cannot take a core.
 */
final class CopyReader {
    /** One read in its own transaction: true when its copy was kept, false when it went stale. */
    @FunctionalInterface
    interface Read {
        boolean run(Transaction tx);
    }

    private final String thread;
    /** Keys whose copy is being read now, and when the next read may start (nanoTime). */
    private final ConcurrentHashMap<String, Long> reading = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, Long> nextRead = new ConcurrentHashMap<>();
    /** Reads in a row that went stale before they were done, per key (reset by one that did not). */
    private final ConcurrentHashMap<String, Integer> staleReads = new ConcurrentHashMap<>();

    /** {@code thread}: the readers' thread name, before the label's. */
    CopyReader(String thread) {
        this.thread = thread;
    }

    /** Starts {@code read} for {@code key} unless one is running or the last went stale too recently. */
    void start(GraphDatabaseService db, String key, String label, Read read) {
        long now = System.nanoTime();
        Long next = nextRead.get(key);
        if ((next != null && now - next < 0) || reading.putIfAbsent(key, now) != null) {
            return;
        }
        Thread reader = new Thread(() -> {
            long started = System.nanoTime();
            try (Transaction tx = db.beginTx()) {
                if (read.run(tx)) {
                    staleReads.remove(key);
                } else {
                    int stale = staleReads.merge(key, 1, Integer::sum);
                    long took = System.nanoTime() - started;
                    nextRead.put(key, System.nanoTime() + took * (1L << Math.min(stale - 1, 10)));
                }
            } catch (RuntimeException | OutOfMemoryError failed) {
                // The database stopped, or the heap could not hold it: K-hop reads the store.
                nextRead.put(key, System.nanoTime() + 60_000_000_000L);
            } finally {
                reading.remove(key);
            }
        }, thread + " " + label);
        reader.setDaemon(true);
        reader.start();
    }
}
