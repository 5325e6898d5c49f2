;; toomany: emits 17 outputs (limits.max_outputs defaults to 16) and
;; returns ok regardless; the host must turn that into a retry.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (local $i i32)
    (loop $again
      (drop (call $emit (i32.const 0) (i32.const 5)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $again (i32.lt_u (local.get $i) (i32.const 17))))
    (i32.const 0)))
