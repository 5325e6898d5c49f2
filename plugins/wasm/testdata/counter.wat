;; counter: counts the events it sees in the state key "n" (a u32, little
;; endian) and passes each on unchanged. Events whose id starts with "x"
;; are answered with retry after counting (so their count must not stay).
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "switchyard" "state_get" (func $state_get (param i32 i32 i32 i32) (result i32)))
  (import "switchyard" "state_put" (func $state_put (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0..4: the pass-through output; 16: the key "n"; 32: the counter
  (data (i32.const 16) "n")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param $len i32) (result i32)
    (local $rc i32)
    (drop (call $input_read (i32.const 1024) (i32.const 64)))
    (i32.store (i32.const 32) (i32.const 0))
    (local.set $rc (call $state_get (i32.const 16) (i32.const 1) (i32.const 32) (i32.const 4)))
    (if (i32.eq (local.get $rc) (i32.const -2)) (then (return (i32.const 1))))
    (i32.store (i32.const 32) (i32.add (i32.load (i32.const 32)) (i32.const 1)))
    (if (i32.ne (call $state_put (i32.const 16) (i32.const 1) (i32.const 32) (i32.const 4) (i32.const 0)) (i32.const 0))
      (then (return (i32.const 1))))
    ;; u8 version | str id: the id's first byte is at 1029
    (if (i32.eq (i32.load8_u (i32.const 1029)) (i32.const 0x78)) (then (return (i32.const 1))))
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (i32.const 0)))
