package testkit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FaultDisk is a folder whose files' syncs can be refused after their
// writes were taken: what a disk does whose write-back failed (EIO, an SD
// card wearing out) or a filesystem that could not allocate what it took
// (ENOSPC from NFS or a thin pool); and whose growth a quota can refuse
// (EDQUOT, with statfs still showing the disk's room, as under a user's
// quota). The folder is a FUSE filesystem,
// passing everything else through to a folder of the real disk, with the
// kernel's FUSE passthrough left off so that each write comes through and
// is seen. It is unmounted when the test ends. It needs /dev/fuse and root
// (or fusermount): without them the test is skipped, saying so.
// docs/decisions/disk-full.md, "A sync refused after the meta page", says
// why it exists.
//
// The filesystem is served by a process of its own, the test binary run
// again (faultDiskServe, from this package's init), never by the test's:
// a test process that maps a file of a filesystem it serves itself hangs
// for good when a page fault waits on the server while the Go runtime
// stops the world (the fault cannot stop; the server cannot run).
type FaultDisk struct {
	Dir   string // the filesystem
	Under string // the folder underneath: what the disk holds

	mu  sync.Mutex
	in  *os.File      // commands to the server
	out *bufio.Reader // its answers
}

// faultDiskServe names the folders (underneath, then the mount point, a
// line each) that a test binary started with it in its environment serves
// as a FaultDisk, instead of running its tests.
const faultDiskServe = "SWITCHYARD_TESTKIT_FAULTDISK"

func init() {
	if dirs, ok := os.LookupEnv(faultDiskServe); ok {
		under, mnt, _ := strings.Cut(dirs, "\n")
		os.Exit(serveFaultDisk(under, mnt, os.Stdin, os.Stdout))
	}
}

// NewFaultDisk mounts a FaultDisk on a new folder.
func NewFaultDisk(t testing.TB) *FaultDisk {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs a disk whose sync can fail: FUSE is not available here (%v)", err)
	}
	dir := t.TempDir()
	d := &FaultDisk{Dir: filepath.Join(dir, "mnt"), Under: filepath.Join(dir, "under")}
	under := d.Under
	for _, p := range []string{d.Dir, under} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	server := exec.Command(self)
	server.Env = append(os.Environ(), faultDiskServe+"="+under+"\n"+d.Dir)
	server.Stderr = os.Stderr
	in, err := server.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	d.in, d.out = in.(*os.File), bufio.NewReader(out)
	t.Cleanup(func() { d.stop(server) })
	mounted := time.AfterFunc(30*time.Second, func() { server.Process.Kill() })
	ready, err := d.out.ReadString('\n')
	if !mounted.Stop() {
		t.Fatal("the FaultDisk's server did not mount it within 30 s")
	}
	if ready != "ready\n" {
		t.Skipf("needs a disk whose sync can fail: mounting a FUSE filesystem takes root or fusermount: %s %v", strings.TrimSpace(ready), err)
	}
	return d
}

// stop ends the server, which unmounts the disk: closing its input tells
// it to. A server that does not end in 10 s is killed.
func (d *FaultDisk) stop(server *exec.Cmd) {
	d.in.Close()
	ended := make(chan struct{})
	go func() { server.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		server.Process.Kill()
		<-ended
	}
}

// ask sends the server one command and returns its answer.
func (d *FaultDisk) ask(command string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := fmt.Fprintln(d.in, command); err != nil {
		return err.Error()
	}
	answer, err := d.out.ReadString('\n')
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(answer)
}

// MetaPages is FailSync's offset for the sync after a bbolt file's meta
// page: bbolt writes it last, at offset 0 or one page.
var MetaPages = int64(2 * os.Getpagesize())

// AnySync is FailSync's offset for the next sync of any file.
const AnySync = int64(math.MaxInt64)

// FailSync makes one sync refuse with errno: the first to come, of a file
// whose last write began below the offset below. What the file's writes
// since its last sync replaced is put back underneath (in Under), as a
// disk whose write-back failed holds what it held, while the kernel's
// cache of the file (what its open files read) keeps the writes. Below
// MetaPages refuses the sync after a bbolt meta page or, when a sync comes
// before any other write (bbolt's after it grows the file, an empty
// commit's first), that one. Each call adds one refusal, taken in order.
func (d *FaultDisk) FailSync(errno syscall.Errno, below int64) {
	d.tell(fmt.Sprintf("fail %d %d", int(errno), below))
}

// SyncsFailed is how many syncs FailSync's refusals have refused.
func (d *FaultDisk) SyncsFailed() int64 { return d.count("failed") }

// Quota refuses, with EDQUOT, any write, truncate or allocation that would
// take the folder's files past their size now plus extra bytes (the
// files' sizes, sparse or not, as a quota on apparent size). A negative
// extra lifts the quota.
func (d *FaultDisk) Quota(extra int64) { d.tell(fmt.Sprintf("quota %d", extra)) }

// QuotaRefusals is how many writes, truncates and allocations the quota
// has refused.
func (d *FaultDisk) QuotaRefusals() int64 { return d.count("refused") }

// Held is the path of a copy of what the disk holds of the file name (in
// Under, not what the kernel's cache shows): what a restart after a power
// cut would find.
func (d *FaultDisk) Held(t testing.TB, name string) string {
	t.Helper()
	held, err := os.ReadFile(filepath.Join(d.Under, name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, held, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tell sends the server a command that answers ok.
func (d *FaultDisk) tell(command string) {
	if answer := d.ask(command); answer != "ok" {
		panic("testkit: the FaultDisk's server: " + answer)
	}
}

// count sends the server a command that answers a count (-1: it did not).
func (d *FaultDisk) count(command string) int64 {
	n, err := strconv.ParseInt(d.ask(command), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// serveFaultDisk mounts mnt, passing through to under, and serves it,
// taking commands from in (FailSync's, Quota's and their counts) and answering on
// out, until in ends; then it unmounts. It returns the process's exit code.
func serveFaultDisk(under, mnt string, in *os.File, out *os.File) int {
	faults := &diskFaults{under: under}
	root := &fs.LoopbackRoot{Path: under}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &faultNode{LoopbackNode: fs.LoopbackNode{RootData: r}, faults: faults}
	}
	root.RootNode = root.NewNode(root, nil, "", nil)
	server, err := fs.Mount(mnt, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true, // as root: no fusermount needed
		FsName:      "faultdisk",
		Name:        "faultdisk",
		// The kernel's cache of a file keeps what was written though the
		// file underneath changes (what a refused sync puts back): as a
		// disk's cache keeps pages whose write-back failed.
		ExplicitDataCacheControl: true,
	}})
	if err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return 1
	}
	var st syscall.Stat_t
	syscall.Stat(mnt, &st)
	fmt.Fprintln(out, "ready")
	commands := bufio.NewScanner(in)
	for commands.Scan() {
		fmt.Fprintln(out, faults.command(strings.Fields(commands.Text())))
	}
	if server.Unmount() != nil {
		abortFUSE(st.Dev) // a file the test left open: its calls fail now
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	return 0
}

// abortFUSE ends the FUSE connection of the filesystem on device dev,
// through the kernel's fusectl (mounted if it is not): every call to it
// fails from then on, so that a file left open cannot hang its process.
func abortFUSE(dev uint64) {
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, strconv.FormatUint(uint64(unix.Minor(dev)), 10), "abort")
	if _, err := os.Stat(abort); err != nil {
		syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	os.WriteFile(abort, []byte("1"), 0o200)
}

// diskFaults are the refusals a FaultDisk's server was asked for.
type diskFaults struct {
	under string // the folder served

	mu     sync.Mutex
	queued []syncFault
	failed atomic.Int64

	limit   atomic.Int64 // the quota on the files' sizes; 0: none
	refused atomic.Int64
}

// syncFault is a sync FailSync asked to refuse.
type syncFault struct {
	errno syscall.Errno
	below int64 // the file's last write began below this offset
}

// command runs one of the server's commands and returns its answer.
func (f *diskFaults) command(words []string) string {
	switch {
	case len(words) == 3 && words[0] == "fail":
		errno, err1 := strconv.Atoi(words[1])
		below, err2 := strconv.ParseInt(words[2], 10, 64)
		if err1 != nil || err2 != nil {
			return "bad command"
		}
		f.mu.Lock()
		f.queued = append(f.queued, syncFault{errno: syscall.Errno(errno), below: below})
		f.mu.Unlock()
		return "ok"
	case len(words) == 1 && words[0] == "failed":
		return strconv.FormatInt(f.failed.Load(), 10)
	case len(words) == 2 && words[0] == "quota":
		extra, err := strconv.ParseInt(words[1], 10, 64)
		if err != nil {
			return "bad command"
		}
		f.limit.Store(0)
		if extra >= 0 {
			f.limit.Store(f.used() + extra)
		}
		return "ok"
	case len(words) == 1 && words[0] == "refused":
		return strconv.FormatInt(f.refused.Load(), 10)
	}
	return "bad command"
}

// used is the sum of the sizes of the files served.
func (f *diskFaults) used() (n int64) {
	filepath.WalkDir(f.under, func(_ string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// grow is the error for taking a file of size bytes to end bytes: EDQUOT
// when the quota has no room for it.
func (f *diskFaults) grow(size, end int64) syscall.Errno {
	limit := f.limit.Load()
	if limit == 0 || end <= size || f.used()+end-size <= limit {
		return 0
	}
	f.refused.Add(1)
	return syscall.EDQUOT
}

// refuse is the error for a sync of a file whose last write began at
// offset last: the first refusal queued, if it matches, taken.
func (f *diskFaults) refuse(last int64) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queued) == 0 || last < 0 || last >= f.queued[0].below {
		return 0
	}
	errno := f.queued[0].errno
	f.queued = f.queued[1:]
	f.failed.Add(1)
	return errno
}

// faultNode is a file or folder of a FaultDisk: its files open as
// faultFiles.
type faultNode struct {
	fs.LoopbackNode
	faults *diskFaults
}

func (n *faultNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(fh), fuseFlags, errno
}

func (n *faultNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return inode, n.wrap(fh), fuseFlags, errno
}

func (n *faultNode) wrap(fh fs.FileHandle) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	f := &faultFile{LoopbackFile: lf, faults: n.faults}
	f.last.Store(-1)
	return f
}

// faultFile is an open file of a FaultDisk: it notes where each write
// began and what it replaced, and asks before each sync.
type faultFile struct {
	*fs.LoopbackFile
	faults *diskFaults
	last   atomic.Int64 // where the last write began; -1 before the first

	mu       sync.Mutex
	unsynced []replaced // by the writes since the last sync, in order
}

// replaced is what a write replaced: the bytes at off before it.
type replaced struct {
	off int64
	was []byte
}

func (f *faultFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.grow(ctx, off+int64(len(data))); errno != 0 {
		return 0, errno
	}
	f.last.Store(off)
	f.mu.Lock()
	defer f.mu.Unlock()
	was := make([]byte, len(data))
	if r, errno := f.LoopbackFile.Read(ctx, was, off); errno == 0 {
		b, _ := r.Bytes(was)
		f.unsynced = append(f.unsynced, replaced{off: off, was: bytes.Clone(b)})
		r.Done()
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

// Setattr is refused when it would make the file longer than the quota
// lets it (bbolt grows its file with ftruncate).
func (f *faultFile) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if errno := f.grow(ctx, int64(size)); errno != 0 {
			return errno
		}
	}
	return f.LoopbackFile.Setattr(ctx, in, out)
}

func (f *faultFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if errno := f.grow(ctx, int64(off+size)); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Allocate(ctx, off, size, mode)
}

// grow asks the quota for taking the file to end bytes.
func (f *faultFile) grow(ctx context.Context, end int64) syscall.Errno {
	var attr fuse.AttrOut
	if errno := f.LoopbackFile.Getattr(ctx, &attr); errno != 0 {
		return errno
	}
	return f.faults.grow(int64(attr.Size), end)
}

// Fsync takes the file's writes to the disk, or, if asked to refuse,
// puts back underneath what they replaced (the last first) and refuses.
func (f *faultFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	refused := f.faults.refuse(f.last.Load())
	if refused != 0 {
		for i := len(f.unsynced) - 1; i >= 0; i-- {
			f.LoopbackFile.Write(ctx, f.unsynced[i].was, f.unsynced[i].off)
		}
	}
	f.unsynced = f.unsynced[:0]
	if errno := f.LoopbackFile.Fsync(ctx, flags); errno != 0 {
		return errno
	}
	return refused
}

// PassthroughFd keeps the kernel's FUSE passthrough off: with it, reads
// and writes would go to the file underneath without coming through Write.
func (f *faultFile) PassthroughFd() (int, bool) { return 0, false }
