;; chatty: writes a line to stdout (WASI fd_write), logs a warning through
;; log(), then writes 5000 bytes to stderr: more than the 4 KiB per call
;; the host lets through. Passes the event through.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "switchyard" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\64\00\00\00\12\00\00\00") ;; iovec {100, 18}
  (data (i32.const 32) "\00\04\00\00\88\13\00\00") ;; iovec {1024, 5000}
  (data (i32.const 100) "hello from stdout\n")
  (data (i32.const 200) "a warning from log()")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
    (call $log (i32.const 3) (i32.const 200) (i32.const 20))
    (memory.fill (i32.const 1024) (i32.const 0x65) (i32.const 5000))
    (drop (call $fd_write (i32.const 2) (i32.const 32) (i32.const 1) (i32.const 8)))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (i32.const 0)))
