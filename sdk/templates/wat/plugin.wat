;; __NAME__ sends each event on, unchanged, along its type's route, and
;; filters out events whose type ends in ".noise". (Adding a header in WAT
;; means writing every header out again: see the output envelope in the SDK's
;; README.) Envelopes: little-endian, str = u32 length + bytes.
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "switchyard" "fail" (func $fail (param i32 i32)))

  ;; 0..4     the pass-through output: destination "" (u32 0), flags 0
  ;; 16..     constants; 1024.. the event
  (memory (export "memory") 1)
  (data (i32.const 16) ".noise")
  (data (i32.const 32) "output refused")

  (func (export "sy_abi_version") (result i32) (i32.const 1))

  (func (export "sy_handle") (param $len i32) (result i32)
    (local $type i32) (local $tlen i32)
    ;; room for the event: grow the memory to 1024 + len
    (if (i32.gt_u (i32.add (i32.const 1024) (local.get $len)) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.div_u (local.get $len) (i32.const 65536)) (i32.const 1))))))
    (drop (call $input_read (i32.const 1024) (local.get $len)))
    ;; u8 version | str id | str type ...
    (local.set $type (i32.add (i32.const 1029) (i32.load (i32.const 1025))))
    (local.set $tlen (i32.load (local.get $type)))
    (if (call $ends_with_noise (i32.add (local.get $type) (i32.const 4)) (local.get $tlen))
      (then (return (i32.const 0)))) ;; no output: filtered
    (if (i32.lt_s (call $emit (i32.const 0) (i32.const 5)) (i32.const 0))
      (then
        (call $fail (i32.const 32) (i32.const 14))
        (return (i32.const 2))))
    (i32.const 0))

  ;; ends_with_noise(ptr, len): the text at ptr ends in ".noise"
  (func $ends_with_noise (param $p i32) (param $n i32) (result i32)
    (local $i i32)
    (if (i32.lt_u (local.get $n) (i32.const 6)) (then (return (i32.const 0))))
    (local.set $p (i32.add (local.get $p) (i32.sub (local.get $n) (i32.const 6))))
    (block $no
      (loop $next
        (br_if $no (i32.ne (i32.load8_u (i32.add (local.get $p) (local.get $i)))
                           (i32.load8_u (i32.add (i32.const 16) (local.get $i)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $next (i32.lt_u (local.get $i) (i32.const 6))))
      (return (i32.const 1)))
    (i32.const 0)))
