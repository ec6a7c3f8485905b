//! Checks docs/keys/advlock_key.rs against every vector in pg_test/vectors/advlock_key_v1.json.
//! run.sh builds it in a throwaway cargo project (deps: siphasher, serde_json) under /tmp.
//! Usage: verify path/to/advlock_key_v1.json
#[path = "advlock_key.rs"]
mod advlock_key;
use advlock_key::{advlock_key, advlock_key_int, advlock_key_ns};

fn main() {
    let path = std::env::args().nth(1).expect("usage: verify vectors.json");
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let vectors = file["vectors"].as_array().unwrap();
    let (mut passed, mut failed) = (0, 0);
    for v in vectors {
        let ns = v["ns"].as_str().unwrap();
        let want = v["key"].as_i64().expect("key is an i64");
        let (got, ok, id) = if let Some(id) = v.get("id_int") {
            let id = id.as_i64().expect("id_int is an i64");
            (advlock_key_int(ns, id), true, id.to_string())
        } else {
            let id = v["id"].as_str().unwrap();
            let ns_only = id.is_empty() && advlock_key_ns(ns) != want;
            (advlock_key(ns, id), !ns_only, id.to_string())
        };
        if ok && got == want {
            passed += 1;
        } else {
            failed += 1;
            println!("FAIL {ns:?}, {id:?}: got {got}, want {want}");
        }
    }
    std::panic::set_hook(Box::new(|_| {}));
    if std::panic::catch_unwind(|| advlock_key("", "x")).is_err() {
        passed += 1;
    } else {
        failed += 1;
        println!("FAIL empty ns must be rejected");
    }
    println!("rust: {} vectors + 1 empty-ns check", vectors.len());
    println!("rust: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 && passed > 0 { 0 } else { 1 });
}
