package io.github.seederdgl.procedures;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

/**
 * The integer dot product of int8 codes with 16-bit query codes in SIMD lanes, through the JDK's
 * incubating Vector API: eight products per instruction where the scalar loop makes one.
 *
 * <p>Only touched when the server runs with {@code --add-modules=jdk.incubator.vector} (as
 * {@code seeder-dgl neo4j start} does, for Lucene's vector search) and the CPU has 256-bit
 * integer vectors; otherwise {@link SeedIndex} sums in scalar code. Both sum the same integers,
 * so the bounds are identical either way.
 */
final class VectorDot {
    private static final VectorSpecies<Integer> INTS = IntVector.SPECIES_256;
    private static final VectorSpecies<Byte> BYTES = ByteVector.SPECIES_64;
    /** Products summed per lane before they move to a long: 512 * 127 * 32767 < 2^31. */
    private static final int LANE_TERMS = 512;

    private VectorDot() {
    }

    /** Whether the preferred vector shape holds eight ints (else the lanes would be emulated, slowly). */
    static boolean usable() {
        return IntVector.SPECIES_PREFERRED.vectorBitSize() >= 256;
    }

    /** Σ_i codes[offset + i] * query[i] over i < dimension. */
    static long dot(byte[] codes, int offset, int[] query, int dimension) {
        long total = 0;
        int step = INTS.length();
        int bound = INTS.loopBound(dimension);
        int i = 0;
        while (i < bound) {
            int stop = Math.min(bound, i + LANE_TERMS * step);
            IntVector sum = IntVector.zero(INTS);
            for (; i < stop; i += step) {
                IntVector c = (IntVector) ByteVector.fromArray(BYTES, codes, offset + i)
                        .convertShape(VectorOperators.B2I, INTS, 0);
                sum = sum.add(c.mul(IntVector.fromArray(INTS, query, i)));
            }
            total += sum.reduceLanesToLong(VectorOperators.ADD);
        }
        for (; i < dimension; i++) {
            total += codes[offset + i] * query[i];
        }
        return total;
    }
}
