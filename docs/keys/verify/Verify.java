// Checks AdvlockKey.java (Guava) and/or AdvlockKeyNoDeps.java against every vector in
// pg_test/vectors/advlock_key_v1.json. Usage: java Verify vectors.json ClassName...
// The JDK has no JSON parser, so a minimal one for this file's shape is included.
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.*;

public class Verify {
    public static void main(String[] args) throws Exception {
        String json = new String(Files.readAllBytes(Path.of(args[0])), StandardCharsets.UTF_8);
        @SuppressWarnings("unchecked")
        List<Object> vectors = (List<Object>) ((Map<String, Object>) new Json(json).value()).get("vectors");
        boolean allOk = true;
        for (int a = 1; a < args.length; a++) {
            Class<?> impl = Class.forName(args[a]);
            Method text = impl.getMethod("of", String.class, String.class);
            Method bigint = impl.getMethod("of", String.class, long.class);
            Method nsOnly = impl.getMethod("of", String.class);
            int passed = 0, failed = 0;
            for (Object o : vectors) {
                @SuppressWarnings("unchecked") Map<String, Object> v = (Map<String, Object>) o;
                String ns = (String) v.get("ns");
                long want = (Long) v.get("key");
                long got;
                boolean ok = true;
                Object id = v.containsKey("id_int") ? v.get("id_int") : v.get("id");
                if (id instanceof Long) {
                    got = (Long) bigint.invoke(null, ns, id);
                } else {
                    got = (Long) text.invoke(null, ns, id);
                    if (id.equals("")) ok = (Long) nsOnly.invoke(null, ns) == want;
                }
                if (ok && got == want) passed++;
                else { failed++; System.out.printf("FAIL %s %s, %s: got %d, want %d%n", args[a], ns, id, got, want); }
            }
            try {
                text.invoke(null, "", "x");
                failed++; System.out.println("FAIL " + args[a] + ": empty ns must be rejected");
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof IllegalArgumentException) passed++;
                else { failed++; System.out.println("FAIL " + args[a] + ": empty ns: " + e.getCause()); }
            }
            System.out.printf("java (%s): %d vectors + 1 empty-ns check%n", args[a], vectors.size());
            System.out.printf("java (%s): %d passed, %d failed%n", args[a], passed, failed);
            allOk &= failed == 0 && passed > 0;
        }
        System.exit(allOk ? 0 : 1);
    }

    /** Objects, arrays, strings (all escapes), integers (as Long), true/false/null. */
    static final class Json {
        private final String s;
        private int p;
        Json(String s) { this.s = s; }

        Object value() {
            ws();
            char c = s.charAt(p);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                p++; ws();
                if (s.charAt(p) == '}') { p++; return m; }
                while (true) {
                    ws(); String k = string(); ws(); expect(':');
                    m.put(k, value()); ws();
                    if (s.charAt(p++) == '}') return m;
                }
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                p++; ws();
                if (s.charAt(p) == ']') { p++; return l; }
                while (true) {
                    l.add(value()); ws();
                    if (s.charAt(p++) == ']') return l;
                }
            }
            if (c == '"') return string();
            for (String lit : new String[] {"true", "false", "null"})
                if (s.startsWith(lit, p)) { p += lit.length(); return lit.equals("null") ? null : lit.equals("true"); }
            int start = p;
            while (p < s.length() && "-0123456789".indexOf(s.charAt(p)) >= 0) p++;
            return Long.parseLong(s.substring(start, p)); // throws on anything but an integer
        }

        private String string() {
            expect('"');
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = s.charAt(p++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(p++);
                switch (e) {
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'n': b.append('\n'); break;
                    case 'r': b.append('\r'); break;
                    case 't': b.append('\t'); break;
                    case 'u': b.append((char) Integer.parseInt(s.substring(p, p + 4), 16)); p += 4; break;
                    default: b.append(e); // " \ /
                }
            }
        }

        private void ws() { while (p < s.length() && Character.isWhitespace(s.charAt(p))) p++; }

        private void expect(char c) {
            if (s.charAt(p++) != c) throw new IllegalStateException("expected " + c + " at " + (p - 1));
        }
    }
}
