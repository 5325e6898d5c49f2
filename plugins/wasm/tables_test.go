package wasm

import (
	"os"
	"testing"
)

// The table reader takes any bytes without a panic: every prefix of a
// module with tables, and each of its bytes flipped, is read or refused.
// A table without a maximum gets its minimum as one; one with a maximum
// is left as it is.
func TestBoundTablesReadsAnyBytes(t *testing.T) {
	for _, name := range []string{"tablegrow", "tablebomb"} {
		bin, err := os.ReadFile(testdata(name))
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(bin) {
			boundTables(bin[:n])
			flipped := append([]byte(nil), bin...)
			flipped[n] ^= 0xff
			boundTables(flipped)
		}
	}
	bin, _ := os.ReadFile(testdata("tablegrow"))
	bounded, bytes, err := boundTables(bin)
	if err != nil || bytes != 16*tableElementBytes {
		t.Fatalf("tablegrow: %d bytes, %v", bytes, err)
	}
	_, start, end, _ := findSection(bounded, sectionTable)
	if got, want := bounded[start:end], []byte{1, 0x70, limitsMinMax, 16, 16}; string(got) != string(want) {
		t.Fatalf("tablegrow's table section % x, want % x", got, want)
	}
	again, _, _ := boundTables(bounded)
	if &again[0] != &bounded[0] {
		t.Fatal("a module whose tables all have a maximum was copied")
	}
}
