// advlock key contract v1 in plain Java (no dependency): same results as AdvlockKey.java.
// AdvlockKeyNoDeps.of(ns, id) == SELECT advlock_key(ns, id) — SipHash-2-4, all-zero key, over
// UTF-8(ns) || 0x00 || UTF-8(id), as a signed long. Bind it with ps.setLong(...).
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

public final class AdvlockKeyNoDeps {
    private AdvlockKeyNoDeps() {}

    public static long of(String ns, String id) {
        if (ns == null || ns.isEmpty()) throw new IllegalArgumentException("ns must be a non-empty string");
        byte[] n = ns.getBytes(StandardCharsets.UTF_8), i = id.getBytes(StandardCharsets.UTF_8);
        int len = n.length + 1 + i.length, end = len & ~7;
        // ns, 0x00, id, zero padding to a whole block, message length (mod 256) in the last byte
        ByteBuffer b = ByteBuffer.allocate(end + 8).order(ByteOrder.LITTLE_ENDIAN).put(n).put((byte) 0).put(i);
        b.put(end + 7, (byte) len);
        long[] v = {0x736f6d6570736575L, 0x646f72616e646f6dL, 0x6c7967656e657261L, 0x7465646279746573L};
        for (int off = 0; off <= end; off += 8) {
            long m = b.getLong(off);
            v[3] ^= m; round(v, 2); v[0] ^= m;
        }
        v[2] ^= 0xff; round(v, 4);
        return v[0] ^ v[1] ^ v[2] ^ v[3];
    }

    public static long of(String ns, long id) { return of(ns, Long.toString(id)); }

    public static long of(String ns) { return of(ns, ""); }

    private static void round(long[] v, int times) {
        for (int t = 0; t < times; t++) {
            v[0] += v[1]; v[1] = Long.rotateLeft(v[1], 13) ^ v[0]; v[0] = Long.rotateLeft(v[0], 32);
            v[2] += v[3]; v[3] = Long.rotateLeft(v[3], 16) ^ v[2];
            v[0] += v[3]; v[3] = Long.rotateLeft(v[3], 21) ^ v[0];
            v[2] += v[1]; v[1] = Long.rotateLeft(v[1], 17) ^ v[2]; v[2] = Long.rotateLeft(v[2], 32);
        }
    }
}
