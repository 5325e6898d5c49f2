package wasm

import "syscall"

// reserve maps n bytes of anonymous memory, read-write, backed only as
// pages are touched (MAP_NORESERVE: no swap is set aside for the rest);
// nil if the mapping fails (linearMemory then grows a Go slice).
func reserve(n uint64) []byte {
	if n == 0 || n > 1<<40 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return b
}

// release unmaps what reserve mapped.
func release(b []byte) { _ = syscall.Munmap(b) }
