//go:build !linux

package wasm

// reserve maps nothing here: linearMemory grows a Go slice.
func reserve(uint64) []byte { return nil }

func release([]byte) {}
