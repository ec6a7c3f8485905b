// Checks docs/keys/advlock_key.go against every vector in pg_test/vectors/advlock_key_v1.json.
// run.sh builds it in GOPATH mode with the package at example.com/advlock.
// Usage: verify path/to/advlock_key_v1.json
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"example.com/advlock"
)

type vector struct {
	NS    string  `json:"ns"`
	ID    *string `json:"id"`
	IDInt *int64  `json:"id_int"`
	Key   int64   `json:"key"`
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var file struct{ Vectors []vector }
	if err := json.Unmarshal(raw, &file); err != nil { // int64 fields decode exactly
		panic(err)
	}
	passed, failed := 0, 0
	check := func(ok bool, what string) {
		if ok {
			passed++
		} else {
			failed++
			fmt.Println("FAIL", what)
		}
	}
	for _, v := range file.Vectors {
		var got int64
		var desc string
		ok := true
		if v.IDInt != nil {
			got, desc = advlock.KeyInt(v.NS, *v.IDInt), fmt.Sprint(*v.IDInt)
		} else {
			got, desc = advlock.Key(v.NS, *v.ID), *v.ID
			if *v.ID == "" {
				ok = advlock.KeyNS(v.NS) == v.Key
			}
		}
		check(ok && got == v.Key, fmt.Sprintf("%q, %q: got %d, want %d", v.NS, desc, got, v.Key))
	}
	func() {
		defer func() { check(recover() != nil, "empty ns must be rejected") }()
		advlock.Key("", "x")
	}()
	fmt.Printf("go: %d vectors + 1 empty-ns check\n", len(file.Vectors))
	fmt.Printf("go: %d passed, %d failed\n", passed, failed)
	if failed > 0 || passed == 0 {
		os.Exit(1)
	}
}
