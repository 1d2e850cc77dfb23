package io.github.seederdgl.procedures;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.stream.Stream;

import org.neo4j.procedure.Description;
import org.neo4j.procedure.Mode;
import org.neo4j.procedure.Procedure;

/**
 * The heap every in-memory copy of K-hop ({@link Adjacency}, {@link NodeCopy}) shares, over all
 * datasets and databases: a quarter of the heap. Each copy is also capped at an eighth on its own;
 * without a shared cap, several large datasets on one server could each take their eighth and
 * together leave the server (started with {@code -XX:+ExitOnOutOfMemoryError}) without heap.
 *
 * <p>A copy asks to be kept once it is read. Copies gone stale (a write since they were read) are
 * dropped first, so a dataset no longer queried does not hold its memory; a copy that still does
 * not fit is refused, and K-hop reads that dataset through the store until its next write (or a
 * restart), as above the per-copy cap.
 */
public final class CopyBudget {
    static final long TOTAL = Runtime.getRuntime().maxMemory() / 4;

    private record Held(String kind, String label, long bytes, BooleanSupplier current, Runnable drop) {
    }

    /** Kept copies by identity: two copies of one key are never held at once (the stale one is dropped). */
    private static final Map<Object, Held> HELD = new IdentityHashMap<>();

    /**
     * Whether {@code copy} ({@code bytes} of heap) may be kept beside the copies held now: those no
     * longer {@code current} are dropped (their {@code drop} runs) before the sum is taken.
     */
    private static synchronized boolean admit(Object copy, String kind, String label, long bytes, BooleanSupplier current,
                                      Runnable drop) {
        long held = 0;
        for (Iterator<Held> it = HELD.values().iterator(); it.hasNext(); ) {
            Held h = it.next();
            if (h.current.getAsBoolean()) {
                held += h.bytes;
            } else {
                h.drop.run();
                it.remove();
            }
        }
        if (held + bytes > TOTAL) {
            return false;
        }
        HELD.put(copy, new Held(kind, label, bytes, current, drop));
        return true;
    }

    /**
     * Puts {@code read} under {@code key} in its owner's {@code copies}: as read where it is not
     * {@code usable} anyway or the budget admits it, else {@code refused} (an unusable copy under the
     * same stamps). A copy it replaces (a read in the call and one in the background, both done) is
     * released. Returns what was put.
     */
    static <T> T keep(ConcurrentHashMap<String, T> copies, String key, T read, boolean usable, String kind,
                      String label, long bytes, BooleanSupplier current, Supplier<T> refused) {
        T kept = usable && !admit(read, kind, label, bytes, current, () -> copies.remove(key, read))
                ? refused.get() : read;
        T replaced = copies.put(key, kept);
        if (replaced != null && replaced != kept) {
            release(replaced);
        }
        return kept;
    }

    /** {@code copy} is no longer kept (its owner found it stale). */
    static synchronized void release(Object copy) {
        HELD.remove(copy);
    }

    private static synchronized List<Held> held() {
        return new ArrayList<>(HELD.values());
    }

    public static class Copy {
        public String kind;
        public String label;
        public long bytes;
        public boolean current;
        public long budget;

        Copy(String kind, String label, long bytes, boolean current, long budget) {
            this.kind = kind;
            this.label = label;
            this.bytes = bytes;
            this.current = current;
            this.budget = budget;
        }
    }

    @Procedure(name = "seeder.copies", mode = Mode.READ)
    @Description("seeder.copies(): the in-memory copies seeder.khop keeps (kind 'relationships' or 'nodes', the "
            + "dataset's label, bytes of heap, whether no write has made it stale yet) and the heap they share "
            + "(budget: a quarter of the server's heap, over every database).")
    public Stream<Copy> copies() {
        return held().stream().map(h -> new Copy(h.kind, h.label, h.bytes, h.current.getAsBoolean(), TOTAL));
    }
}
