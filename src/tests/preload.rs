// Labels and namespace statistics. The pgrx suite runs preloaded by default (see
// `pg_test::postgresql_conf_options` in lib.rs; ADVLOCK_PGRX_PRELOAD=off runs it without), and
// every test here asserts the behaviour of the configuration it finds. Tests run concurrently
// on one server, so each uses its own namespace and looks only at its own backend's rows.
// Transaction ends, other sessions and full tables are covered by pg_test/regress/sql/preload.sql
// and the preload-*.spec isolation tests.
#[pgrx::pg_schema]
mod tests {
    use crate::tests::{error_of, one_bool, one_i64, one_text};
    use pgrx::prelude::*;

    fn preloaded() -> bool {
        one_bool("SELECT current_setting('advlock.max_labels', true) IS NOT NULL")
    }

    /// "label|scope|mode|since_ok" of this backend's lock on advlock_key(ns, id), or "none".
    fn my_label(key_sql: &str) -> String {
        Spi::get_one::<String>(&format!(
            "SELECT coalesce(string_agg(format('%s|%s|%s|%s', coalesce(label, '-'), coalesce(scope, '-'), mode,
                        coalesce((held_since BETWEEN xact_start AND clock_timestamp())::text, '-')), ';' ORDER BY mode), 'none')
               FROM advlock_holders WHERE pid = pg_backend_pid() AND key = {key_sql}"
        ))
        .unwrap()
        .unwrap()
    }

    fn my_entries(key_sql: &str) -> i64 {
        one_i64(&format!(
            "SELECT count(*) FROM advlock_labels() WHERE pid = pg_backend_pid() AND key = {key_sql}"
        ))
    }

    #[pg_test]
    fn labels_fill_holders_for_ns_id_locks() {
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-labels', 'a', 0)"
        ));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-labels', 7, 0, 'session')"
        ));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-labels', 'sh', 0, 'session', 'shared')"
        ));
        if preloaded() {
            assert_eq!(
                my_label("advlock_key('pgrx-labels', 'a')"),
                "pgrx-labels:a|xact|exclusive|true"
            );
            assert_eq!(
                my_label("advlock_key('pgrx-labels', 7)"),
                "pgrx-labels:7|session|exclusive|true"
            );
            assert_eq!(
                my_label("advlock_key('pgrx-labels', 'sh')"),
                "pgrx-labels:sh|session|shared|true"
            );
        } else {
            assert_eq!(
                my_label("advlock_key('pgrx-labels', 'a')"),
                "-|-|exclusive|-"
            );
            assert_eq!(one_i64("SELECT count(*) FROM advlock_labels()"), 0);
        }
        // advlock_unlock removes the entry with the last session hold.
        assert!(one_bool("SELECT advlock_unlock('pgrx-labels', 7)"));
        assert_eq!(my_label("advlock_key('pgrx-labels', 7)"), "none");
        assert_eq!(my_entries("advlock_key('pgrx-labels', 7)"), 0);
        assert!(one_bool(
            "SELECT advlock_unlock('pgrx-labels', 'sh', 'shared')"
        ));
        assert_eq!(my_entries("advlock_key('pgrx-labels', 'sh')"), 0);
    }

    #[pg_test]
    fn reentrant_holds_share_one_entry_and_track_scope() {
        let key = "advlock_key('pgrx-reenter', 1)";
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-reenter', 1, 0)"
        ));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-reenter', '1', 0, 'session')"
        ));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-reenter', 1, 0, 'session')"
        ));
        if !preloaded() {
            assert_eq!(my_entries(key), 0);
            return;
        }
        assert_eq!(my_entries(key), 1);
        // A session hold outlives the transaction: the entry says 'session' while any is held.
        assert_eq!(my_label(key), "pgrx-reenter:1|session|exclusive|true");
        assert!(one_bool("SELECT advlock_unlock('pgrx-reenter', 1)"));
        assert_eq!(my_label(key), "pgrx-reenter:1|session|exclusive|true");
        assert!(one_bool("SELECT advlock_unlock('pgrx-reenter', 1)"));
        // Only the transaction hold is left.
        assert_eq!(my_label(key), "pgrx-reenter:1|xact|exclusive|true");
        assert_eq!(my_entries(key), 1);
    }

    #[pg_test]
    fn bare_keys_and_builtins_get_no_label() {
        assert!(one_bool("SELECT advlock_try_with_timeout(-918273, 0)"));
        Spi::run("SELECT pg_advisory_xact_lock(advlock_key('pgrx-builtin', 1))").unwrap();
        assert_eq!(my_label("-918273"), "-|-|exclusive|-");
        assert_eq!(
            my_label("advlock_key('pgrx-builtin', 1)"),
            "-|-|exclusive|-"
        );
        assert_eq!(my_entries("-918273"), 0);
    }

    #[pg_test]
    fn labels_are_truncated_at_a_character_boundary() {
        // 'pgrx-trunc:' is 11 bytes, each 'é' 2: 58 of them fill 127 bytes exactly.
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-trunc', repeat('\u{e9}', 100), 0)"
        ));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-trunc', 'x' || repeat('\u{e9}', 100), 0)"
        ));
        if !preloaded() {
            return;
        }
        assert_eq!(
            one_text(
                "SELECT string_agg(format('%s/%s', octet_length(label),
                                          label = left('pgrx-trunc:' || id, char_length(label))), ',' ORDER BY id)
                   FROM advlock_labels() l
                   JOIN (VALUES (repeat('\u{e9}', 100)), ('x' || repeat('\u{e9}', 100))) v(id)
                     ON l.key = advlock_key('pgrx-trunc', v.id)
                  WHERE l.pid = pg_backend_pid()"
            ),
            // 'x' shifts the boundary: 12 + 2 * 57 = 126, a 2-byte character does not fit in 127.
            "126/t,127/t"
        );
    }

    #[pg_test]
    fn stats_count_per_namespace_and_reset() {
        if !preloaded() {
            for view in ["advlock_stats", "advlock_stats_info"] {
                assert_eq!(
                    error_of(&format!("SELECT * FROM {view}")),
                    "55000: advlock must be loaded via \"shared_preload_libraries\""
                );
            }
            assert_eq!(
                error_of("SELECT advlock_stats_reset('x')"),
                "55000: advlock must be loaded via \"shared_preload_libraries\""
            );
            return;
        }
        Spi::run("SELECT advlock_stats_reset('pgrx-stats')").unwrap();
        assert_eq!(
            one_i64("SELECT count(*) FROM advlock_stats WHERE ns = 'pgrx-stats'"),
            0
        );
        for sql in [
            "SELECT advlock_try_with_timeout('pgrx-stats', 1, 0)",
            "SELECT advlock_try_with_timeout('pgrx-stats', 'two', 1000, 'session')",
            "SELECT advlock_lock_with_timeout('pgrx-stats', 3, 0)",
            // Re-entering a held lock is an immediate acquisition too.
            "SELECT advlock_try_with_timeout('pgrx-stats', 1, 0)",
        ] {
            Spi::run(sql).unwrap();
        }
        assert_eq!(
            one_text(
                "SELECT format('%s/%s/%s/%s/%s/%s/%s', acquisitions, immediate, waits, timeouts,
                               total_wait_time, max_wait_time, stats_since <= clock_timestamp())
                   FROM advlock_stats WHERE ns = 'pgrx-stats'"
            ),
            "4/4/0/0/0/0/t"
        );
        // Per-namespace reset forgets exactly that row.
        Spi::run("SELECT advlock_stats_reset('pgrx-stats')").unwrap();
        assert_eq!(
            one_i64("SELECT count(*) FROM advlock_stats WHERE ns = 'pgrx-stats'"),
            0
        );
        Spi::run("SELECT advlock_try_with_timeout('pgrx-stats', 1, 0)").unwrap();
        assert_eq!(
            one_i64("SELECT acquisitions FROM advlock_stats WHERE ns = 'pgrx-stats'"),
            1
        );
        Spi::run("SELECT advlock_unlock('pgrx-stats', 'two')").unwrap();
    }

    #[pg_test]
    fn bare_keys_count_under_a_null_namespace() {
        if !preloaded() {
            return;
        }
        let before = one_i64(
            "SELECT coalesce((SELECT acquisitions FROM advlock_stats WHERE ns IS NULL), 0)",
        );
        assert!(one_bool("SELECT advlock_try_with_timeout(-5550001, 0)"));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout(-5550002, 0, 'xact', 'shared')"
        ));
        // Other tests may count bare keys concurrently: at least ours are there.
        assert!(one_i64("SELECT acquisitions FROM advlock_stats WHERE ns IS NULL") >= before + 2);
    }

    #[pg_test]
    fn capacity_settings_are_postmaster_settings() {
        if !preloaded() {
            assert_eq!(
                one_i64("SELECT count(*) FROM pg_settings WHERE name IN ('advlock.max_labels', 'advlock.max_namespaces')"),
                0
            );
            return;
        }
        assert_eq!(
            one_text(
                "SELECT string_agg(format('%s=%s(%s,%s..%s)', name, setting, context, min_val, max_val), ' ' ORDER BY name)
                   FROM pg_settings WHERE name IN ('advlock.max_labels', 'advlock.max_namespaces')"
            ),
            "advlock.max_labels=4096(postmaster,1..1000000) advlock.max_namespaces=256(postmaster,1..100000)"
        );
        assert_eq!(
            error_of("SET advlock.max_labels = 10"),
            "55P02: parameter \"advlock.max_labels\" cannot be changed without restarting the server"
        );
        assert_eq!(
            one_text("SELECT format('%s/%s', max_labels, max_namespaces) FROM advlock_stats_info"),
            "4096/256"
        );
    }

    #[pg_test]
    fn reset_is_not_granted_to_public() {
        Spi::run("CREATE ROLE advlock_pgrx_nobody NOLOGIN").unwrap();
        assert_eq!(
            one_text(
                "SELECT format('%s/%s',
                          has_function_privilege('advlock_pgrx_nobody', 'advlock_stats_reset(text)', 'EXECUTE'),
                          has_function_privilege('advlock_pgrx_nobody', 'advlock_labels()', 'EXECUTE'))"
            ),
            "f/t"
        );
    }

    #[pg_test]
    fn labels_of_other_roles_need_pg_read_all_stats() {
        if !preloaded() {
            return;
        }
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('pgrx-private', 'secret', 0)"
        ));
        Spi::run("CREATE ROLE advlock_pgrx_reader NOLOGIN").unwrap();
        Spi::run("GRANT SELECT ON advlock_holders TO advlock_pgrx_reader").unwrap();
        Spi::run("SET LOCAL ROLE advlock_pgrx_reader").unwrap();
        let hidden = my_label("advlock_key('pgrx-private', 'secret')");
        Spi::run("RESET ROLE").unwrap();
        Spi::run("GRANT pg_read_all_stats TO advlock_pgrx_reader").unwrap();
        Spi::run("SET LOCAL ROLE advlock_pgrx_reader").unwrap();
        let shown = my_label("advlock_key('pgrx-private', 'secret')");
        Spi::run("RESET ROLE").unwrap();
        // Scope and time are pg_locks-level facts; the label is application data.
        // (pg_stat_activity hides xact_start from that role too, hence no time check.)
        assert_eq!(hidden, "-|xact|exclusive|-");
        assert_eq!(shown, "pgrx-private:secret|xact|exclusive|true");
    }
}
