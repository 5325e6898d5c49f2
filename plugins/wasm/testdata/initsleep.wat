;; initsleep: sy_init sleeps an hour (WASI poll_oneoff, one relative clock
;; subscription); init's bound must end it.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_init") (param i32) (result i32)
    ;; the subscription at 2048 (tag 0 = clock, relative), its timeout at +24
    (i64.store (i32.const 2072) (i64.const 3600000000000))
    (drop (call $poll_oneoff (i32.const 2048) (i32.const 3072) (i32.const 1) (i32.const 3104)))
    (i32.const 0))
  (func (export "sy_handle") (param i32) (result i32) (i32.const 0)))
