;; gopanic: what a Go plugin's panic does on wasip1: the runtime writes
;; "panic: <message>" and the goroutine's stack to stderr (WASI fd_write),
;; then the module traps.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\64\00\00\00\3d\00\00\00") ;; iovec {100, 61}
  (data (i32.const 100) "panic: boom: custom message\n\ngoroutine 1 [running]:\nmain.f()\n")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $fd_write (i32.const 2) (i32.const 16) (i32.const 1) (i32.const 8)))
    unreachable))
