package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A module's tables are memory wazero allocates outside the allocator
// that bounds its linear memory (memory.go): 8 bytes an element, up to
// 2^27 elements a table, any number of tables, each growable by
// table.grow and filled in one instruction by table.fill, which no
// timeout interrupts. A security trial's plugin with three tables of
// 2^27 elements made the router resident at 3 GB and ran 16 s against a
// 50 ms timeout; one declaring a table of 0 and growing it, the same. So
// the router reads a module's table section before compiling it
// (boundTables):
//   - a table without a maximum gets its minimum as maximum: table.grow
//     then returns -1, as the specification lets a host do. The
//     toolchains the SDKs use declare tables that never grow (Go's
//     without a maximum, Rust's, C's and AssemblyScript's with one equal
//     to the minimum);
//   - the tables' elements at their maxima count in limits.memory: the
//     linear memory gets what they leave, and a module whose tables alone
//     exceed it does not load.
//
// Tables a module imports would have to come from the host, which
// exports none: such a module fails to instantiate.

// tableElementBytes is what wazero keeps for a table element (a
// reference: a pointer on 64-bit platforms).
const tableElementBytes = 8

const (
	sectionTable = 4
	limitsMin    = 0x00 // a minimum only
	limitsMinMax = 0x01 // a minimum and a maximum
)

// boundTables returns bin with a maximum on every table it defines (the
// minimum, where it declared none) and the bytes those tables may hold
// at most. bin is returned as it is when every table has a maximum.
func boundTables(bin []byte) (bounded []byte, bytes uint64, err error) {
	header, start, end, err := findSection(bin, sectionTable)
	if err != nil || header < 0 {
		return bin, 0, err
	}
	body, elems, err := boundTableSection(bin[start:end])
	if err != nil {
		return nil, 0, fmt.Errorf("its table section: %w", err)
	}
	bytes = elems * tableElementBytes
	if body == nil {
		return bin, bytes, nil
	}
	out := make([]byte, 0, len(bin)+len(body)-(end-start)+binary.MaxVarintLen32)
	out = append(out, bin[:header+1]...) // up to the section's id
	out = binary.AppendUvarint(out, uint64(len(body)))
	out = append(out, body...)
	out = append(out, bin[end:]...)
	return out, bytes, nil
}

// findSection returns where the section with id begins in bin (its id
// byte) and where its body begins and ends, or -1s when bin has none.
func findSection(bin []byte, id byte) (header, start, end int, err error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return -1, -1, -1, errors.New("not a WebAssembly module (no \\0asm header)")
	}
	for i := 8; i < len(bin); i = end {
		size, n := binary.Uvarint(bin[i+1:])
		if n <= 0 || size > uint64(len(bin)-i-1-n) {
			return -1, -1, -1, fmt.Errorf("the size of the section at byte %d is malformed", i)
		}
		start, end = i+1+n, i+1+n+int(size)
		if bin[i] == id {
			return i, start, end, nil
		}
	}
	return -1, -1, -1, nil
}

// boundTableSection reads a table section's body: a count, then each
// table's element type and limits. It returns the body again with a
// maximum on every table (nil when each had one) and the elements they
// may hold at most, summed.
func boundTableSection(sec []byte) (body []byte, elems uint64, err error) {
	count, n := binary.Uvarint(sec)
	if n <= 0 {
		return nil, 0, errors.New("its table count is malformed")
	}
	out := binary.AppendUvarint(make([]byte, 0, len(sec)+8), count)
	rewritten := false
	for i, rest := uint64(0), sec[n:]; i < count; i++ {
		if len(rest) < 2 {
			return nil, 0, errors.New("it ends inside a table")
		}
		refType, flags := rest[0], rest[1]
		lo, n := binary.Uvarint(rest[2:])
		if n <= 0 {
			return nil, 0, fmt.Errorf("table %d: its minimum is malformed", i)
		}
		rest = rest[2+n:]
		hi := lo
		switch flags {
		case limitsMinMax:
			if hi, n = binary.Uvarint(rest); n <= 0 {
				return nil, 0, fmt.Errorf("table %d: its maximum is malformed", i)
			}
			rest = rest[n:]
		case limitsMin:
			rewritten = true
		default:
			return nil, 0, fmt.Errorf("table %d: limits of a kind the router does not take (flags %#x)", i, flags)
		}
		out = append(out, refType, limitsMinMax)
		out = binary.AppendUvarint(out, lo)
		out = binary.AppendUvarint(out, hi)
		elems += hi
	}
	if !rewritten {
		return nil, elems, nil
	}
	return out, elems, nil
}
