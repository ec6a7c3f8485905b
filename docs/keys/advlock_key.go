// Package advlock computes advlock keys client-side, contract v1:
// Key(ns, id) == SELECT advlock_key(ns, id) — SipHash-2-4 with an all-zero key over
// UTF-8(ns) || 0x00 || UTF-8(id), read as a signed int64.
//
// Uses github.com/dchest/siphash (pure Go, no cgo; Debian: golang-siphash-dev), so no
// hand-written SipHash is needed. Pass the int64 straight to the driver as a bigint
// (pgx / database/sql: db.QueryRow("SELECT pg_try_advisory_lock($1)", advlock.Key("rollup", "nightly"))).
package advlock

import (
	"strconv"

	"github.com/dchest/siphash"
)

// Key returns advlock_key(ns, id). Go strings are bytes: ns and id must be valid UTF-8
// (string literals and text read from PostgreSQL are). An empty ns is rejected by the
// database, so it is a programming error here too.
func Key(ns, id string) int64 {
	if ns == "" {
		panic("advlock.Key: ns must not be empty")
	}
	b := make([]byte, 0, len(ns)+1+len(id))
	b = append(b, ns...)
	b = append(b, 0)
	b = append(b, id...)
	return int64(siphash.Hash(0, 0, b))
}

// KeyInt returns advlock_key(ns, id bigint): the key of id's decimal text (42 -> "42").
func KeyInt(ns string, id int64) int64 { return Key(ns, strconv.FormatInt(id, 10)) }

// KeyNS returns advlock_key(ns), the same as Key(ns, "").
func KeyNS(ns string) int64 { return Key(ns, "") }
