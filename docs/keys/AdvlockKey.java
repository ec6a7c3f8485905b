// advlock key contract v1 for Java, with Guava (com.google.guava:guava; verified with 31.1):
// AdvlockKey.of(ns, id) == SELECT advlock_key(ns, id) — SipHash-2-4 with an all-zero key over
// UTF-8(ns) || 0x00 || UTF-8(id); Guava's asLong() is exactly the reference 64-bit result as a
// signed long. Bind it as a bigint: ps.setLong(1, AdvlockKey.of("rollup", "nightly")).
// No Guava? AdvlockKeyNoDeps.java beside this file is the same function in plain Java.
import com.google.common.hash.Hashing;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

public final class AdvlockKey {
    private AdvlockKey() {}

    /** advlock_key(ns, id). Strings must be well-formed UTF-16 (a lone surrogate encodes as '?'). */
    public static long of(String ns, String id) {
        if (ns == null || ns.isEmpty()) throw new IllegalArgumentException("ns must be a non-empty string");
        byte[] n = ns.getBytes(StandardCharsets.UTF_8), i = id.getBytes(StandardCharsets.UTF_8);
        byte[] msg = ByteBuffer.allocate(n.length + 1 + i.length).put(n).put((byte) 0).put(i).array();
        return Hashing.sipHash24(0L, 0L).hashBytes(msg).asLong();
    }

    /** advlock_key(ns, id bigint): the key of id's decimal text (42 -> "42"). */
    public static long of(String ns, long id) { return of(ns, Long.toString(id)); }

    /** advlock_key(ns), the same as of(ns, ""). */
    public static long of(String ns) { return of(ns, ""); }
}
