;; emitloop: emits the event unchanged, then runs forever on events whose id
;; starts with "x"; returns ok on the others.
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    ;; u8 version | u32 id length | id...: the id starts at 1024+5
    (drop (call $input_read (i32.const 1024) (i32.const 64)))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (if (i32.eq (i32.load8_u (i32.const 1029)) (i32.const 0x78))
      (then (loop $forever (br $forever))))
    (i32.const 0)))
