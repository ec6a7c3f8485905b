-- advlock SQL edition: advlock_key, key spec v1, in PL/pgSQL.
--
-- key = int64(SipHash-2-4(k0 = 0, k1 = 0, UTF-8(ns) || 0x00 || UTF-8(id))), exactly as
-- src/keys.rs; pg_test/vectors/advlock_key_v1.json proves both. SipHash works on unsigned
-- 64-bit words; bigint arithmetic raises on overflow, so the sum of two words is taken as
-- their low 62 bits (which cannot overflow) plus the top two bits and the carry, shifted
-- back in with << (bigint shifts wrap silently). XOR, OR and shifts need no emulation;
-- >> is arithmetic, so a rotation masks the bits shifted in from the left.

-- The hash itself, on the message bytes. Not part of the extension's API: the edition's own
-- helper, named advlock_edition_* like every edition-only object.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_siphash24(msg pg_catalog.bytea)
RETURNS pg_catalog.int8
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    len int := octet_length(msg);
    -- Eight zero bytes after the message: the last (partial, maybe empty) word reads like a full one.
    padded bytea := msg || '\x0000000000000000'::bytea;
    last_word int := len / 8;   -- index of the final word (the partial one, maybe empty)
    v0 bigint := 8317987319222330741;   -- 0x736f6d6570736575 xor k0 (0)
    v1 bigint := 7237128888997146477;   -- 0x646f72616e646f6d xor k1 (0)
    v2 bigint := 7816392313619706465;   -- 0x6c7967656e657261 xor k0
    v3 bigint := 8387220255154660723;   -- 0x7465646279746573 xor k1
    m bigint;
    o int;
    w int := 0;
    r int;
BEGIN
    LOOP
        IF w <= last_word THEN
            o := w * 8;
            -- Little-endian word; bytes as bigint so that << 56 wraps into the sign bit.
            m := get_byte(padded, o)::bigint
               | (get_byte(padded, o + 1)::bigint << 8)
               | (get_byte(padded, o + 2)::bigint << 16)
               | (get_byte(padded, o + 3)::bigint << 24)
               | (get_byte(padded, o + 4)::bigint << 32)
               | (get_byte(padded, o + 5)::bigint << 40)
               | (get_byte(padded, o + 6)::bigint << 48)
               | (get_byte(padded, o + 7)::bigint << 56);
            IF w = last_word THEN
                -- The final word carries the message length (mod 256) in its top byte.
                m := m | ((len & 255)::bigint << 56);
            END IF;
        ELSE
            m := 0;   -- the finalization pass mixes in nothing
        END IF;
        v3 := v3 # m;
        -- c = 2 compression rounds per word, d = 4 finalization rounds: one SipRound body.
        r := CASE WHEN w > last_word THEN 4 ELSE 2 END;
        FOR i IN 1 .. r LOOP
            v0 := (((v0 & 4611686018427387903) + (v1 & 4611686018427387903)) & 4611686018427387903) | (((v0 >> 62) + (v1 >> 62) + (((v0 & 4611686018427387903) + (v1 & 4611686018427387903)) >> 62)) << 62);
            v1 := ((v1 << 13) | ((v1 >> 51) & 8191)) # v0;
            v0 := ((v0 << 32) | ((v0 >> 32) & 4294967295));
            v2 := (((v2 & 4611686018427387903) + (v3 & 4611686018427387903)) & 4611686018427387903) | (((v2 >> 62) + (v3 >> 62) + (((v2 & 4611686018427387903) + (v3 & 4611686018427387903)) >> 62)) << 62);
            v3 := ((v3 << 16) | ((v3 >> 48) & 65535)) # v2;
            v0 := (((v0 & 4611686018427387903) + (v3 & 4611686018427387903)) & 4611686018427387903) | (((v0 >> 62) + (v3 >> 62) + (((v0 & 4611686018427387903) + (v3 & 4611686018427387903)) >> 62)) << 62);
            v3 := ((v3 << 21) | ((v3 >> 43) & 2097151)) # v0;
            v2 := (((v2 & 4611686018427387903) + (v1 & 4611686018427387903)) & 4611686018427387903) | (((v2 >> 62) + (v1 >> 62) + (((v2 & 4611686018427387903) + (v1 & 4611686018427387903)) >> 62)) << 62);
            v1 := ((v1 << 17) | ((v1 >> 47) & 131071)) # v2;
            v2 := ((v2 << 32) | ((v2 >> 32) & 4294967295));
        END LOOP;
        EXIT WHEN w > last_word;
        v0 := v0 # m;
        IF w = last_word THEN
            v2 := v2 # 255;
        END IF;
        w := w + 1;
    END LOOP;
    RETURN v0 # v1 # v2 # v3;
END
$fn$;

-- The error for a NULL key argument (key, keys) of fn, raised only on that error path, so the
-- uncontended path of the functions checking it makes no extra call.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_null_key(fn pg_catalog.text, argument pg_catalog.text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'argument "%" of % must not be null', argument, fn
        USING ERRCODE = 'null_value_not_allowed',
              HINT = 'A NULL key would lock nothing: pass a value for every part of the key.';
END
$fn$;

-- The namespace and id checks shared by advlock_key and the acquisition functions, with the
-- extension's messages (src/keys.rs, src/errors.rs); fn names the function called.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_check_target(fn pg_catalog.text, ns pg_catalog.text, id_is_null pg_catalog.bool)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL THEN
        RAISE EXCEPTION 'argument "ns" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'A NULL key would lock nothing: pass a value for every part of the key.';
    END IF;
    IF ns = '' THEN
        RAISE EXCEPTION 'argument "ns" of % must not be empty', fn
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name the feature the lock belongs to, e.g. advlock_key(''billing'', 42): the namespace keeps features from colliding.';
    END IF;
    IF id_is_null THEN
        RAISE EXCEPTION 'argument "id" of % must not be null', fn
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'A NULL key would lock nothing: pass a value for every part of the key.';
    END IF;
END
$fn$;

-- advlock_key's three forms: not STRICT, like the extension's, so that a NULL is an error
-- naming the argument rather than a silent NULL key. The checks run only when an argument is
-- NULL or empty; the common path is the hash alone.
-- @forms id: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_key(ns pg_catalog.text, id @id_type@)
RETURNS pg_catalog.int8
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_key', ns, id IS NULL);
    END IF;
    RETURN @extschema@.advlock_edition_siphash24(convert_to(ns, 'UTF8') || '\x00'::bytea || convert_to(id, 'UTF8'));  -- @only text
    -- An integer id hashes as its decimal text ("42", "-7"): int8out's digits are ASCII.  -- @only int
    RETURN @extschema@.advlock_edition_siphash24(convert_to(ns, 'UTF8') || '\x00'::bytea || convert_to(id::text, 'UTF8'));  -- @only int
END
$fn$;
-- @end forms

CREATE OR REPLACE FUNCTION @extschema@.advlock_key(ns pg_catalog.text)
RETURNS pg_catalog.int8
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_key', ns, false);
    END IF;
    RETURN @extschema@.advlock_edition_siphash24(convert_to(ns, 'UTF8') || '\x00'::bytea);
END
$fn$;
