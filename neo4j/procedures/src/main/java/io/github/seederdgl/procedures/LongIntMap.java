package io.github.seederdgl.procedures;

import java.util.Arrays;

/**
 * A map from long keys (internal node ids) to non-negative ints, in two flat arrays with linear
 * probing. A hop meets tens of thousands of neighbours at Prime scale; a {@code HashMap} boxes
 * every key and allocates an entry for it, which took a tenth of the K-hop's time.
 */
final class LongIntMap {
    /** What {@link #get} returns for a key that is not there. */
    static final int ABSENT = -1;
    private static final long EMPTY = Long.MIN_VALUE;  // not an internal id: those are >= 0

    private long[] keys;
    private int[] values;
    private int size;

    LongIntMap(int expected) {
        int capacity = Integer.highestOneBit(Math.max(4, expected) * 2 - 1) << 1;
        keys = new long[capacity];
        Arrays.fill(keys, EMPTY);
        values = new int[capacity];
    }

    int size() {
        return size;
    }

    int get(long key) {
        int mask = keys.length - 1;
        for (int slot = slot(key, mask); ; slot = (slot + 1) & mask) {
            long found = keys[slot];
            if (found == key) {
                return values[slot];
            }
            if (found == EMPTY) {
                return ABSENT;
            }
        }
    }

    boolean containsKey(long key) {
        return get(key) != ABSENT;
    }

    /** Puts {@code value} under {@code key} unless the key is there; returns the value now kept. */
    int putIfAbsent(long key, int value) {
        if (key == EMPTY || value < 0) {
            throw new IllegalArgumentException("LongIntMap keeps keys above Long.MIN_VALUE and values >= 0");
        }
        int mask = keys.length - 1;
        int slot = slot(key, mask);
        for (; keys[slot] != EMPTY; slot = (slot + 1) & mask) {
            if (keys[slot] == key) {
                return values[slot];
            }
        }
        keys[slot] = key;
        values[slot] = value;
        if (++size * 2 > keys.length) {
            grow();
        }
        return value;
    }

    private void grow() {
        long[] oldKeys = keys;
        int[] oldValues = values;
        keys = new long[oldKeys.length * 2];
        Arrays.fill(keys, EMPTY);
        values = new int[keys.length];
        int mask = keys.length - 1;
        for (int i = 0; i < oldKeys.length; i++) {
            if (oldKeys[i] != EMPTY) {
                int slot = slot(oldKeys[i], mask);
                while (keys[slot] != EMPTY) {
                    slot = (slot + 1) & mask;
                }
                keys[slot] = oldKeys[i];
                values[slot] = oldValues[i];
            }
        }
    }

    /** Internal ids are dense and sequential: mixed (a Fibonacci hash) so that runs of them spread. */
    private static int slot(long key, int mask) {
        return (int) ((key * 0x9E3779B97F4A7C15L) >>> 32) & mask;
    }
}
