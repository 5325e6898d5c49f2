;; scribble: writes its memory in an endless loop; for a runtime closed
;; while the call runs (its memory must stay mapped until the call exits).
(module
  (memory (export "memory") 2)
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (local $i i32)
    (loop $scribble
      (i32.store (i32.and (local.get $i) (i32.const 0x1fffc)) (local.get $i))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br $scribble))
    (i32.const 0)))
