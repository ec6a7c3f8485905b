//! In-database tests (`cargo pgrx test pg17`): single-session behaviour. Behaviour between
//! sessions lives in the isolation specs under pg_test/isolation.
mod acquisition;
mod diagnostics;
mod key_sets;
mod keys;
mod preload;
mod wait_events;

use pgrx::prelude::*;

/// Runs `sql` and returns "SQLSTATE: message" of the error it raises, or "no error".
/// The plpgsql exception block gives the statement its own subtransaction, so the test's
/// transaction stays usable.
pub fn error_of(sql: &str) -> String {
    Spi::run(
        "CREATE OR REPLACE FUNCTION pg_temp.error_of(q text) RETURNS text LANGUAGE plpgsql AS $$
         BEGIN EXECUTE q; RETURN 'no error';
         EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $$",
    )
    .unwrap();
    Spi::get_one_with_args::<String>("SELECT pg_temp.error_of($1)", &[sql.into()])
        .unwrap()
        .unwrap()
}

pub fn one_i64(sql: &str) -> i64 {
    Spi::get_one::<i64>(sql).unwrap().expect("NULL result")
}

pub fn one_bool(sql: &str) -> bool {
    Spi::get_one::<bool>(sql).unwrap().expect("NULL result")
}

pub fn one_text(sql: &str) -> String {
    Spi::get_one::<String>(sql).unwrap().expect("NULL result")
}
