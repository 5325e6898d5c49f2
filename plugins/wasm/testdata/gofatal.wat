;; gofatal: what a Go plugin's fatal error does on wasip1 (a deadlock, the
;; runtime out of memory): the runtime writes "fatal error: <message>" and
;; the goroutines' stacks to stderr (WASI fd_write), then the module traps.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\64\00\00\00\59\00\00\00") ;; iovec {100, 89}
  (data (i32.const 100) "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.f()\n")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $fd_write (i32.const 2) (i32.const 16) (i32.const 1) (i32.const 8)))
    unreachable))
