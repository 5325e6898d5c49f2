;; recurse: on events whose id starts with "x", calls itself without end,
;; so the runtime's call stack overflows; passes the others through.
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $deeper (param i64) (result i64)
    (i64.add (call $deeper (i64.add (local.get 0) (i64.const 1))) (i64.const 1)))
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $input_read (i32.const 1024) (i32.const 64)))
    (if (i32.eq (i32.load8_u (i32.const 1029)) (i32.const 0x78))
      (then (drop (call $deeper (i64.const 0)))))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (i32.const 0)))
