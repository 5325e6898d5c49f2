package storage

// A randomized damage test of walkPages against bbolt (a review): each
// iteration copies a sound file, damages it in one random way inside a
// page the tree reaches (or its stored free list), and compares
//
//	(a) walkPages(path, nil), in this process (it must never panic);
//	(b) bbolt's Tx.Check on a read-only open, in a child process (its walk
//	    of a file without a stored free list runs on a goroutine of
//	    bbolt's own, where a panic or a fault ends the process);
//	(c) in the same child, openBolt(path, writable(0)) and a View that reads
//	    every key and value of every bucket, nested ones too.
//
// A gap: the walk passes the file, and (b) reports anything or the child
// dies. A false alarm: the walk refuses a file that (b) and (c) accept.
//
// It runs only when WALK_RANDOM_DAMAGE holds the number of iterations:
//
//	WALK_RANDOM_DAMAGE=3000 WALK_RANDOM_SEED=1 WALK_RANDOM_MINUTES=18 \
//	WALK_RANDOM_DIR=/tmp/review4-tmp go test ./storage -run '^TestWalkRandomDamage$' -v -timeout 30m
//
// WALK_RANDOM_ONLY=i,j runs those iterations alone (with the same seed and
// the same base files, which it keeps in WALK_RANDOM_DIR/bases).

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
)

const (
	envRandomN     = "WALK_RANDOM_DAMAGE"
	envRandomSeed  = "WALK_RANDOM_SEED"
	envRandomDir   = "WALK_RANDOM_DIR"
	envRandomMin   = "WALK_RANDOM_MINUTES"
	envRandomOnly  = "WALK_RANDOM_ONLY"
	envRandomChild = "WALK_RANDOM_CHILD" // "bc:<path>" or "c:<path>"
)

// A damage region: n bytes at off in the file, of a kind, in page page.
type dmgRegion struct {
	off, n int64
	kind   string
	page   uint64
}

// dmgBase is a sound file and what can be damaged in it.
type dmgBase struct {
	name    string
	path    string
	m       Meta
	regions map[string][]dmgRegion
	kinds   []string
	pages   []uint64 // reached page ids (page values for the writes)
	digest  string   // viewDigest of the sound file
}

// dmgTargets walks the file's tree leniently (it is sound) and lists its
// regions by kind.
func dmgTargets(t testing.TB, name, path string) *dmgBase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	m, ok := currentMeta(f)
	f.Close()
	if !ok {
		t.Fatal("no meta")
	}
	d := &dmgBase{name: name, path: path, m: m, regions: map[string][]dmgRegion{}}
	ps := int64(m.PageSize)
	le := binary.LittleEndian
	add := func(kind string, off, n int64, page uint64) {
		if n <= 0 {
			return
		}
		d.regions[kind] = append(d.regions[kind], dmgRegion{off, n, kind, page})
	}
	var elems func(id uint64, pageOff int64, p []byte, inline bool)
	var page func(id uint64)
	page = func(id uint64) {
		d.pages = append(d.pages, id)
		off := int64(id) * ps
		ov := int64(le.Uint32(b[off+12:]))
		p := b[off : off+(ov+1)*ps]
		add("header", off, 16, id)
		add("page-any", off, int64(len(p)), id)
		elems(id, off, p, false)
	}
	elems = func(id uint64, pageOff int64, p []byte, inline bool) {
		flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
		pre := ""
		if inline {
			pre = "inline-"
			add("inline-header", pageOff, 16, id)
		}
		add(pre+"elems", pageOff+16, int64(count*16), id)
		for i := range count {
			at := 16 + i*16
			e := p[at:]
			if flags == branchPage {
				pos, ks := int(le.Uint32(e)), int(le.Uint32(e[4:]))
				add(pre+"key", pageOff+int64(at+pos), int64(ks), id)
				page(le.Uint64(e[8:]))
				continue
			}
			fl, pos, ks, vs := le.Uint32(e), int(le.Uint32(e[4:])), int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
			add(pre+"key", pageOff+int64(at+pos), int64(ks), id)
			v := p[at+pos+ks : at+pos+ks+vs]
			voff := pageOff + int64(at+pos+ks)
			if fl&bucketLeaf == 0 {
				add(pre+"value", voff, int64(vs), id)
				continue
			}
			add("bucket-header", voff, 16, id)
			if root := le.Uint64(v); root != 0 {
				page(root)
			} else {
				elems(id, voff+16, v[16:], true)
			}
		}
	}
	page(m.Root)
	if m.FreeList != noFreelist {
		off := int64(m.FreeList) * ps
		ov := int64(le.Uint32(b[off+12:]))
		add("freelist-header", off, 24, m.FreeList)
		add("freelist", off, (ov+1)*ps, m.FreeList)
	}
	for k := range d.regions {
		d.kinds = append(d.kinds, k)
	}
	sort.Strings(d.kinds)
	return d
}

// dmgWrite is one damage: bytes written at off.
type dmgWrite struct {
	Base  string
	Kind  string // the region's kind
	Page  uint64
	Off   int64 // in the file
	InPg  int64 // in its page (from the page's start, overflow included)
	How   string
	Old   []byte
	New   []byte
	Iter  int
	Level string
}

func (w dmgWrite) String() string {
	return fmt.Sprintf("iter %d base %s: %s at file offset %d (page %d + %d, region %s): %x -> %x",
		w.Iter, w.Base, w.How, w.Off, w.Page, w.InPg, w.Kind, w.Old, w.New)
}

// dmgPick chooses a damage for base d with rng.
func dmgPick(rng *rand.Rand, d *dmgBase, file []byte) dmgWrite {
	kind := d.kinds[rng.IntN(len(d.kinds))]
	rs := d.regions[kind]
	r := rs[rng.IntN(len(rs))]
	off := r.off + rng.Int64N(r.n)
	le := binary.LittleEndian
	w := dmgWrite{Base: d.name, Kind: kind, Page: r.page}
	size := []int{0, 1, 2, 4, 8}[rng.IntN(5)] // 0: a bit flip
	if size > 1 && rng.IntN(2) == 0 {
		// aligned to the field inside the region: headers and elements are
		// made of aligned fields
		off -= (off - r.off) % int64(size)
	}
	if off+int64(max(size, 1)) > int64(len(file)) {
		off = int64(len(file)) - int64(max(size, 1))
	}
	w.Off = off
	w.InPg = off - int64(r.page)*int64(d.m.PageSize)
	if size == 0 {
		bit := rng.IntN(8)
		w.Old = []byte{file[off]}
		w.New = []byte{file[off] ^ 1<<bit}
		w.How = fmt.Sprintf("flip bit %d", bit)
		return w
	}
	w.Old = append([]byte(nil), file[off:off+int64(size)]...)
	var cur uint64
	switch size {
	case 1:
		cur = uint64(file[off])
	case 2:
		cur = uint64(le.Uint16(file[off:]))
	case 4:
		cur = uint64(le.Uint32(file[off:]))
	case 8:
		cur = le.Uint64(file[off:])
	}
	var v uint64
	var how string
	switch rng.IntN(8) {
	case 0:
		v, how = rng.Uint64(), "random"
	case 1:
		v, how = 0, "zero"
	case 2:
		v, how = ^uint64(0), "all ones"
	case 3:
		v, how = uint64(rng.IntN(17)), "small"
	case 4:
		delta := uint64(rng.IntN(8) + 1)
		if rng.IntN(2) == 0 {
			v, how = cur+delta, fmt.Sprintf("+%d", delta)
		} else {
			v, how = cur-delta, fmt.Sprintf("-%d", delta)
		}
	case 5:
		v, how = d.pages[rng.IntN(len(d.pages))], "a reached page id"
	case 6:
		v, how = []uint64{d.m.HighWater - 1, d.m.HighWater, d.m.HighWater + 1, 0, 1, 2}[rng.IntN(6)], "near the high water"
	default:
		v, how = []uint64{0x01, 0x02, 0x04, 0x10, 0x03, 0x11, 0xFFFF, uint64(d.m.PageSize), uint64(d.m.PageSize) - 16}[rng.IntN(9)], "a flag or size"
	}
	buf := make([]byte, 8)
	le.PutUint64(buf, v)
	w.New = buf[:size]
	w.How = fmt.Sprintf("set u%d %s (%#x)", size*8, how, v&(uint64(1)<<(8*size)-1))
	return w
}

// dmgChildResult is what a child process said of a file.
type dmgChildResult struct {
	lines    []string // "B ok", "B problem ...", "C open ok", ...
	crashed  bool
	phase    string // the last phase it began when it crashed
	crashSig string // what the crash was, with bbolt's frame
	stderr   string
	hung     bool
}

func (r dmgChildResult) has(prefix string) (string, bool) {
	for _, l := range r.lines {
		if strings.HasPrefix(l, prefix) {
			return l, true
		}
	}
	return "", false
}

var numRE = regexp.MustCompile(`0x[0-9a-f]+|[0-9]+`)

// runDmgChild runs the test binary on path in mode ("bc" or "c").
func runDmgChild(mode, path string) dmgChildResult {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWalkRandomDamageChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRandomChild+"="+mode+":"+path, "GOTRACEBACK=all")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var r dmgChildResult
	for _, l := range strings.Split(out.String(), "\n") {
		if s, ok := strings.CutPrefix(l, "RES "); ok {
			r.lines = append(r.lines, s)
			if strings.HasSuffix(s, " start") {
				r.phase = strings.TrimSuffix(s, " start")
			}
		}
	}
	_, done := r.has("END")
	if ctx.Err() != nil {
		r.hung, r.crashed = true, true
		r.crashSig = "hang (killed after 60 s) in " + r.phase
		return r
	}
	if err != nil || !done {
		r.crashed = true
		r.stderr = errb.String()
		r.crashSig = crashSignature(r.stderr)
	}
	return r
}

// crashSignature is the crash's first line (numbers masked) and the first
// bbolt (or storage) frame of the goroutine that died.
func crashSignature(stderr string) string {
	lines := strings.Split(stderr, "\n")
	first, frame := "", ""
	for i, l := range lines {
		if first == "" && (strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "unexpected fault")) {
			first = l
			if len(first) > 120 {
				first = first[:120]
			}
			for _, f := range lines[i+1:] {
				if strings.HasPrefix(f, "go.etcd.io/bbolt") && !strings.Contains(f, "internal/common") || strings.HasPrefix(f, "github.com/switchyard-router/switchyard/storage.") {
					frame = f
					if j := strings.Index(frame, "("); j > 0 {
						frame = frame[:j]
					}
					break
				}
			}
		}
	}
	if first == "" {
		first = "no panic line; exit without END"
	}
	return numRE.ReplaceAllString(first, "N") + " @ " + frame
}

// TestWalkRandomDamageChild is the child process: (b) and (c) of a file.
func TestWalkRandomDamageChild(t *testing.T) {
	spec := os.Getenv(envRandomChild)
	if spec == "" {
		t.Skip("the child of TestWalkRandomDamage")
	}
	debug.SetMaxStack(64 << 20) // a loop of pages ends soon, not at 1 GB
	mode, path, _ := strings.Cut(spec, ":")
	say := func(f string, a ...any) { fmt.Printf("RES "+f+"\n", a...); os.Stdout.Sync() }
	if strings.Contains(mode, "b") {
		say("B start")
		var found []string
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			found = append(found, "read-only open: "+err.Error())
		} else {
			db.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					found = append(found, err.Error())
				}
				return nil
			})
			db.Close()
		}
		if len(found) == 0 {
			say("B ok")
		} else {
			say("B problem %d: %.300s", len(found), strings.ReplaceAll(found[0], "\n", " "))
		}
	}
	say("C open start")
	db, err := openBolt(path, writable(0))
	if err != nil {
		say("C open err %.300s", strings.ReplaceAll(err.Error(), "\n", " "))
		time.Sleep(50 * time.Millisecond) // bbolt's walk may go on, on its goroutine
		say("END")
		return
	}
	say("C open ok")
	say("C view start")
	var n int
	func() {
		defer func() {
			if r := recover(); r != nil {
				say("C view panic %.300v", r)
			}
		}()
		var sum uint64
		err := db.View(func(tx *bolt.Tx) error {
			sum, n = viewDigest(tx)
			return nil
		})
		if err != nil {
			say("C view err %v", err)
		} else {
			say("C view ok %016x %d", sum, n)
		}
	}()
	db.Close()
	say("END")
}

// viewDigest reads every key and value of every bucket, nested ones
// too, as bbolt's cursors give them, and hashes them with their path.
func viewDigest(tx *bolt.Tx) (uint64, int) {
	h := fnv.New64a()
	n := 0
	var walk func(b *bolt.Bucket, depth int)
	walk = func(b *bolt.Bucket, depth int) {
		if depth > 100 {
			return
		}
		b.ForEach(func(k, v []byte) error {
			n++
			fmt.Fprintf(h, "%d:%d:%d;", depth, len(k), len(v))
			h.Write(k)
			h.Write(v)
			if v == nil {
				if c := b.Bucket(k); c != nil {
					walk(c, depth+1)
				} else {
					h.Write([]byte("nil bucket"))
				}
			}
			return nil
		})
	}
	tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		h.Write(name)
		walk(b, 1)
		return nil
	})
	return h.Sum64(), n
}

// baseDigest is viewDigest of the sound file at path.
func baseDigest(t *testing.T, path string) string {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sum uint64
	var n int
	db.View(func(tx *bolt.Tx) error { sum, n = viewDigest(tx); return nil })
	return fmt.Sprintf("%016x %d", sum, n)
}

// dmgBases makes (or reuses, in dir) the sound files.
func dmgBases(t *testing.T, dir string) []*dmgBase {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, make func(path string)) *dmgBase {
		path := filepath.Join(dir, name+".db")
		if _, err := os.Stat(path); err != nil {
			tmp := path + ".tmp"
			os.Remove(tmp)
			make(tmp)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
		return dmgTargets(t, name, path)
	}
	bases := []*dmgBase{
		mk("router", func(path string) { routerBase(t, path) }),
		mk("nested", func(path string) { nestedBase(t, path, false) }),
		mk("freelist", func(path string) { nestedBase(t, path, true) }),
	}
	for _, b := range bases {
		if err := walkPages(b.path, nil); err != nil {
			t.Fatalf("base %s: the walk refuses the sound file: %v", b.name, err)
		}
		if found := bboltFinds(t, b.path); len(found) > 0 {
			t.Fatalf("base %s: bbolt finds %v", b.name, found)
		}
		b.digest = baseDigest(t, b.path)
		counts := []string{}
		for _, k := range b.kinds {
			counts = append(counts, fmt.Sprintf("%s %d", k, len(b.regions[k])))
		}
		t.Logf("base %s: %s; %d pages reached; regions: %s", b.name, b.m, len(b.pages), strings.Join(counts, ", "))
	}
	return bases
}

// routerBase is a data file the storage layer made: a few thousand events
// in several queues (some of them inline buckets, one ordered by key), a
// part of them delivered.
func routerBase(t *testing.T, path string) {
	t.Helper()
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(i int, typ string, size int, pk string) *Record {
		r := &Record{
			Event: switchyard.Event{
				ID: fmt.Sprintf("ev-%06d", i), Type: typ, Source: "/shop/checkout", SpecVersion: "1.0",
				Time: now, DataContentType: "application/json", Data: bytes.Repeat([]byte("x"), size),
			},
			Tenant: DefaultTenant, CreatedAt: now.Add(time.Duration(i) * time.Millisecond),
		}
		if pk != "" {
			r.Event.Extensions = []switchyard.Header{{Name: "partitionkey", Value: pk}}
		}
		return r
	}
	i := 0
	for batch := range 30 {
		err := db.Update(ctx, func(tx *Tx) error {
			for j := range 100 {
				var r *Record
				switch {
				case batch < 15:
					r = ev(i, "orders.created", 50+(i*37)%500, "")
				case batch < 25:
					r = ev(i, "orders.paid", 80+(i*13)%200, fmt.Sprintf("cust-%d", i%40))
				default:
					r = ev(i, fmt.Sprintf("misc.t%02d", j%40), 30, "")
				}
				i++
				if err := tx.InsertEvent(r, r.Event.Type == "orders.paid"); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range []string{"orders.created", "orders.paid"} {
		for range 4 {
			err := db.Update(ctx, func(tx *Tx) error {
				due, err := tx.Due(typ, now.Add(time.Hour), 0, Limit{Events: 150}, typ == "orders.paid", func([]byte) bool { return false })
				for _, r := range due {
					r.Outputs = append(r.Outputs, Output{Destination: "nats.local:" + typ, Delivered: true, DeliveredAt: now})
					if err := tx.MarkDelivered(r, now, time.Hour); err != nil {
						return err
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// nestedBase is a plain bbolt file: a bucket of 2,000 keys, a bucket of 300
// sub-buckets (most inline, some with pages of their own), three levels of
// nesting, large values (overflow pages); with a stored free list, some of
// it deleted.
func nestedBase(t *testing.T, path string, storedFreelist bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: !storedFreelist})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		for i := 0; i < 2000 && err == nil; i++ {
			err = b.Put(fmt.Appendf(nil, "key-%05d", i), bytes.Repeat([]byte{byte(i)}, 20+i%150))
		}
		if err != nil {
			return err
		}
		p, err := tx.CreateBucket([]byte("p"))
		for i := 0; i < 300 && err == nil; i++ {
			var s *bolt.Bucket
			if s, err = p.CreateBucket(fmt.Appendf(nil, "sub-%04d", i)); err != nil {
				return err
			}
			n := 1 + i%3
			if i%50 == 7 {
				n = 300
			}
			for j := 0; j < n && err == nil; j++ {
				err = s.Put(fmt.Appendf(nil, "k%04d", j), fmt.Appendf(nil, "value-%d-%d", i, j))
			}
		}
		if err != nil {
			return err
		}
		d, err := tx.CreateBucket([]byte("deep"))
		for i := 0; i < 5 && err == nil; i++ {
			var l1 *bolt.Bucket
			if l1, err = d.CreateBucket(fmt.Appendf(nil, "l1-%d", i)); err != nil {
				return err
			}
			for j := 0; j < 4 && err == nil; j++ {
				var l2 *bolt.Bucket
				if l2, err = l1.CreateBucket(fmt.Appendf(nil, "l2-%d", j)); err != nil {
					return err
				}
				for k := 0; k < 40*(j%2)+2 && err == nil; k++ {
					err = l2.Put(fmt.Appendf(nil, "x%03d", k), bytes.Repeat([]byte("y"), 60))
				}
			}
		}
		if err != nil {
			return err
		}
		big, err := tx.CreateBucket([]byte("big"))
		for i := 0; i < 40 && err == nil; i++ {
			err = big.Put(fmt.Appendf(nil, "big-%03d", i), bytes.Repeat([]byte{byte(i)}, 3000+i*300))
		}
		return err
	})
	if err == nil && storedFreelist {
		err = db.Update(func(tx *bolt.Tx) error {
			for i := 0; i < 2000 && err == nil; i += 3 {
				err = tx.Bucket([]byte("b")).Delete(fmt.Appendf(nil, "key-%05d", i))
			}
			for i := 0; i < 40 && err == nil; i += 2 {
				err = tx.Bucket([]byte("big")).Delete(fmt.Appendf(nil, "big-%03d", i))
			}
			for i := 0; i < 300 && err == nil; i += 7 {
				err = tx.Bucket([]byte("p")).DeleteBucket(fmt.Appendf(nil, "sub-%04d", i))
			}
			return err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// dmgOutcome is one iteration's result.
type dmgOutcome struct {
	w        dmgWrite
	walkErr  error
	walkPan  string
	child    dmgChildResult
	child2   *dmgChildResult // (c) alone, after (b) crashed
	class    string
	detail   string
	keptPath string
}

func TestWalkRandomDamage(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envRandomN))
	if n <= 0 {
		t.Skip("SKIPPED: a randomized damage run of minutes, opt-in: set " + envRandomN + " to the number of iterations (docs/decisions/page-walk.md)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envRandomSeed); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	dir := os.Getenv(envRandomDir)
	if dir == "" {
		dir = t.TempDir()
	}
	minutes := 18.0
	if s := os.Getenv(envRandomMin); s != "" {
		minutes, _ = strconv.ParseFloat(s, 64)
	}
	deadline := time.Now().Add(time.Duration(minutes * float64(time.Minute)))
	t.Logf("seed %d, %d iterations, dir %s, deadline %.1f min", seed, n, dir, minutes)
	bases := dmgBases(t, filepath.Join(dir, "bases"))
	files := make([][]byte, len(bases))
	for i, b := range bases {
		var err error
		if files[i], err = os.ReadFile(b.path); err != nil {
			t.Fatal(err)
		}
	}
	work := filepath.Join(dir, "work")
	keep := filepath.Join(dir, "kept")
	os.MkdirAll(work, 0o755)
	os.MkdirAll(keep, 0o755)

	var iters []int
	if only := os.Getenv(envRandomOnly); only != "" {
		for _, s := range strings.Split(only, ",") {
			i, _ := strconv.Atoi(s)
			iters = append(iters, i)
		}
	} else {
		for i := range n {
			iters = append(iters, i)
		}
	}
	results := make([]*dmgOutcome, len(iters))
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				k := next
				next++
				mu.Unlock()
				if k >= len(iters) || time.Now().After(deadline) {
					return
				}
				results[k] = dmgIteration(t, seed, iters[k], bases, files, work, keep)
			}
		}()
	}
	wg.Wait()

	out := os.Stdout
	if p := os.Getenv(envRandomDir); p != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("results-%d.txt", seed)))
		if err == nil {
			defer f.Close()
			out = f
		}
	}
	counts := map[string]int{}
	bySig := map[string][]*dmgOutcome{}
	done := 0
	for _, r := range results {
		if r == nil {
			continue
		}
		done++
		counts[r.class]++
		if !strings.HasPrefix(r.class, "ok: both") && !strings.HasPrefix(r.class, "benign: all pass, bbolt reads the same") {
			sig := r.class + " | " + r.detail
			bySig[sig] = append(bySig[sig], r)
		}
	}
	fmt.Fprintf(out, "seed %d: %d iterations of %d run\n", seed, done, len(iters))
	var cs []string
	for c := range counts {
		cs = append(cs, c)
	}
	sort.Strings(cs)
	for _, c := range cs {
		fmt.Fprintf(out, "  %-40s %d\n", c, counts[c])
		t.Logf("%-40s %d", c, counts[c])
	}
	var sigs []string
	for s := range bySig {
		sigs = append(sigs, s)
	}
	sort.Strings(sigs)
	gaps := 0
	for _, s := range sigs {
		rs := bySig[s]
		fmt.Fprintf(out, "\n== %s (%d)\n", s, len(rs))
		for j, r := range rs {
			if j >= 6 {
				fmt.Fprintf(out, "   ... %d more\n", len(rs)-j)
				break
			}
			fmt.Fprintf(out, "   %s\n      walk: %v%s\n      child: %q crash=%v %s\n", r.w, r.walkErr, r.walkPan, r.child.lines, r.child.crashed, r.child.crashSig)
			if r.child2 != nil {
				fmt.Fprintf(out, "      (c) alone: %q crash=%v %s\n", r.child2.lines, r.child2.crashed, r.child2.crashSig)
			}
			if r.keptPath != "" {
				fmt.Fprintf(out, "      kept: %s\n", r.keptPath)
			}
		}
		if strings.HasPrefix(s, "GAP") || strings.HasPrefix(s, "WALK-PANIC") {
			gaps += len(rs)
			t.Errorf("%s: %d, e.g. %s", s, len(rs), rs[0].w)
		}
	}
	t.Logf("seed %d: %d iterations run; %d gaps", seed, done, gaps)
}

// viewSame says whether the child's View read what the sound base holds.
func viewSame(r dmgChildResult, d *dmgBase) bool {
	l, ok := r.has("C view ok ")
	return ok && strings.TrimPrefix(l, "C view ok ") == d.digest
}

// dmgIteration runs iteration iter.
func dmgIteration(t *testing.T, seed uint64, iter int, bases []*dmgBase, files [][]byte, work, keep string) *dmgOutcome {
	rng := rand.New(rand.NewPCG(seed, uint64(iter)))
	bi := rng.IntN(len(bases))
	d := bases[bi]
	w := dmgPick(rng, d, files[bi])
	w.Iter = iter
	file := append([]byte(nil), files[bi]...)
	copy(file[w.Off:], w.New)
	path := filepath.Join(work, fmt.Sprintf("it-%d.db", iter))
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Error(err)
		return nil
	}
	defer os.Remove(path)
	o := &dmgOutcome{w: w}
	func() {
		defer func() {
			if r := recover(); r != nil {
				o.walkPan = fmt.Sprintf(" PANIC %v\n%s", r, debug.Stack())
			}
		}()
		o.walkErr = walkPages(path, nil)
	}()
	if bytes.Equal(w.Old, w.New) {
		o.class = "benign: all pass, bbolt reads the same data"
		o.detail = "no change"
		return o
	}
	// (b) and (c) on a copy each time: (c) writes.
	cpy := path + ".c"
	os.WriteFile(cpy, file, 0o600)
	defer os.Remove(cpy)
	o.child = runDmgChild("bc", cpy)
	bProblem, bOK := o.child.has("B problem")
	_, bClean := o.child.has("B ok")
	_ = bOK
	cres := o.child
	if o.child.crashed && (o.child.phase == "B" || o.child.phase == "") {
		os.WriteFile(cpy, file, 0o600)
		c2 := runDmgChild("c", cpy)
		o.child2 = &c2
		cres = c2
	}
	cCrash := cres.crashed
	viewPanic, vp := cres.has("C view panic")
	cDesc := ""
	switch {
	case cCrash:
		cDesc = "crash in " + cres.phase + ": " + cres.crashSig
	case vp:
		cDesc = viewPanic
	}
	bDesc := ""
	switch {
	case bProblem != "":
		bDesc = numRE.ReplaceAllString(bProblem, "N")
		if len(bDesc) > 90 {
			bDesc = bDesc[:90]
		}
	case !bClean:
		bDesc = "B crashed: " + o.child.crashSig
	}
	walkDesc := ""
	if o.walkErr != nil {
		walkDesc = numRE.ReplaceAllString(o.walkErr.Error(), "N")
	}
	switch {
	case o.walkPan != "":
		o.class = "WALK-PANIC"
		o.detail = strings.SplitN(o.walkPan, "\n", 2)[0]
	case o.walkErr == nil && (cCrash || vp):
		o.class = "GAP-c (child dies or View panics)"
		o.detail = cDesc + " / b: " + bDesc
	case o.walkErr == nil && bDesc != "":
		o.class = "GAP-b (bbolt's check reports)"
		o.detail = bDesc
	case o.walkErr == nil && viewSame(cres, d):
		o.class = "benign: all pass, bbolt reads the same data"
	case o.walkErr == nil:
		o.class = "benign: all pass, bbolt reads changed data (" + w.Kind + ")"
	case bDesc != "":
		o.class = "ok: both refuse (b)"
	case cCrash || vp:
		o.class = "ok: walk refuses, (c) dies"
	case viewSame(cres, d):
		o.class = "FALSE-ALARM (walk refuses; bbolt accepts, reads the same data)"
		o.detail = w.Base + " " + w.Kind + ": " + walkDesc
	default:
		o.class = "ok: walk refuses; bbolt accepts but reads changed data"
		o.detail = w.Base + " " + w.Kind + ": " + walkDesc
	}
	if strings.HasPrefix(o.class, "GAP") || strings.HasPrefix(o.class, "WALK") || strings.HasPrefix(o.class, "FALSE") {
		kp := filepath.Join(keep, fmt.Sprintf("it-%d.db", iter))
		os.WriteFile(kp, file, 0o600)
		o.keptPath = kp
		if cres.stderr != "" {
			os.WriteFile(kp+".stderr", []byte(cres.stderr), 0o600)
		}
	}
	return o
}
