// pg_test functions must live in a module named `tests` (pgrx calls "tests"."name"()).
#[pgrx::pg_schema]
mod tests {
    use crate::tests::{error_of, one_i64};
    use pgrx::prelude::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Vectors {
        vectors: Vec<Vector>,
    }

    #[derive(Deserialize)]
    struct Vector {
        ns: String,
        id: Option<String>,
        id_int: Option<i64>,
        key: i64,
    }

    fn vectors() -> Vec<Vector> {
        let json = include_str!("../../pg_test/vectors/advlock_key_v1.json");
        serde_json::from_str::<Vectors>(json)
            .expect("valid vector file")
            .vectors
    }

    #[pg_test]
    fn golden_values() {
        assert_eq!(
            one_i64("SELECT advlock_key('rollup', 'nightly')"),
            2132624222628149741
        );
        assert_eq!(
            one_i64("SELECT advlock_key('account', 42)"),
            7700915891107303510
        );
        assert_eq!(
            one_i64("SELECT advlock_key('migrate')"),
            -4880605526533726798
        );
    }

    #[pg_test]
    fn every_vector_matches_in_sql() {
        let all = vectors();
        assert!(
            all.len() >= 20,
            "the vector file must hold at least 20 cases"
        );
        for v in all {
            let got = match (&v.id, v.id_int) {
                (Some(id), None) => Spi::get_one_with_args::<i64>(
                    "SELECT advlock_key($1, $2)",
                    &[v.ns.as_str().into(), id.as_str().into()],
                ),
                (None, Some(id)) => Spi::get_one_with_args::<i64>(
                    "SELECT advlock_key($1, $2)",
                    &[v.ns.as_str().into(), id.into()],
                ),
                _ => panic!("a vector has exactly one of id / id_int"),
            };
            assert_eq!(
                got.unwrap(),
                Some(v.key),
                "vector ns={:?} id={:?} id_int={:?}",
                v.ns,
                v.id,
                v.id_int
            );
        }
    }

    #[pg_test]
    fn integer_and_text_ids_agree() {
        for id in [
            "42",
            "-7",
            "0",
            "9223372036854775807",
            "-9223372036854775808",
        ] {
            let as_text = one_i64(&format!("SELECT advlock_key('account', '{id}')"));
            let as_int = one_i64(&format!("SELECT advlock_key('account', '{id}'::bigint)"));
            assert_eq!(as_text, as_int, "id {id}");
        }
        assert_eq!(
            one_i64("SELECT advlock_key('migrate')"),
            one_i64("SELECT advlock_key('migrate', '')")
        );
    }

    #[pg_test]
    fn bad_input_is_an_error_naming_the_argument() {
        assert_eq!(
            error_of("SELECT advlock_key(NULL, 'x')"),
            "22004: argument \"ns\" of advlock_key must not be null"
        );
        assert_eq!(
            error_of("SELECT advlock_key('billing', NULL::text)"),
            "22004: argument \"id\" of advlock_key must not be null"
        );
        assert_eq!(
            error_of("SELECT advlock_key('billing', NULL::bigint)"),
            "22004: argument \"id\" of advlock_key must not be null"
        );
        assert_eq!(
            error_of("SELECT advlock_key(NULL)"),
            "22004: argument \"ns\" of advlock_key must not be null"
        );
        assert_eq!(
            error_of("SELECT advlock_key('', 'x')"),
            "22023: argument \"ns\" of advlock_key must not be empty"
        );
        assert_eq!(
            error_of("SELECT advlock_key('')"),
            "22023: argument \"ns\" of advlock_key must not be empty"
        );
    }

    #[pg_test]
    fn declared_immutable_and_parallel_safe() {
        let bad: i64 = one_i64(
            "SELECT count(*) FROM pg_proc WHERE proname = 'advlock_key'
               AND (provolatile <> 'i' OR proparallel <> 's' OR proisstrict)",
        );
        assert_eq!(
            bad, 0,
            "every advlock_key overload is IMMUTABLE, PARALLEL SAFE and not STRICT"
        );
        assert_eq!(
            one_i64("SELECT count(*) FROM pg_proc WHERE proname = 'advlock_key'"),
            3
        );
        // Usable in an index expression (requires IMMUTABLE).
        Spi::run("CREATE TEMP TABLE jobs(ns text, id text)").unwrap();
        Spi::run("CREATE INDEX ON jobs ((advlock_key(ns, id)))").unwrap();
    }

    #[cfg(test)]
    mod reference {
        use super::vectors;

        #[test]
        fn rust_implementation_matches_vectors() {
            for v in vectors() {
                let id =
                    v.id.clone()
                        .unwrap_or_else(|| v.id_int.unwrap().to_string());
                assert_eq!(
                    crate::advlock_key_bytes(v.ns.as_bytes(), id.as_bytes()),
                    v.key,
                    "{:?}/{:?}",
                    v.ns,
                    id
                );
            }
        }
    }
}
