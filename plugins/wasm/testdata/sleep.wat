;; sleep: sleeps with WASI poll_oneoff (one relative clock subscription), as
;; Rust's std::thread::sleep and Go's scheduler do, then passes the event
;; through: an hour on events whose id starts with "x", 30 ms on the others
;; but those whose id starts with "p", which poll stdout for writing (one
;; fd_write subscription, no clock: ready at once).
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (local $first i32)
    ;; u8 version | u32 id length | id...: the id starts at 1024+5
    (drop (call $input_read (i32.const 1024) (i32.const 64)))
    (local.set $first (i32.load8_u (i32.const 1029)))
    ;; the subscription at 2048 (48 bytes, zeroed: userdata 0, tag 0 =
    ;; clock, clock id 0 = realtime, flags 0 = relative); a clock's timeout
    ;; in nanoseconds at +24, an fd_write's tag 2 at +8 and its fd at +16
    (if (i32.eq (local.get $first) (i32.const 0x70))
      (then
        (i32.store8 (i32.const 2056) (i32.const 2))
        (i32.store (i32.const 2064) (i32.const 1)))
      (else
        (i64.store (i32.const 2072)
          (select (i64.const 3600000000000) (i64.const 30000000)
            (i32.eq (local.get $first) (i32.const 0x78))))))
    ;; one event out at 3072, their count at 3104
    (if (call $poll_oneoff (i32.const 2048) (i32.const 3072) (i32.const 1) (i32.const 3104))
      (then (unreachable)))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (i32.const 0)))
