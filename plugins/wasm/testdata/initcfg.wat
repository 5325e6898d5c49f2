;; initcfg: checks that _initialize ran before sy_init, keeps the config
;; envelope sy_init reads, and emits it as the data of every output.
(module
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "switchyard" "fail" (func $fail (param i32 i32)))
  (memory (export "memory") 1)
  (global $initialized (mut i32) (i32.const 0))
  (global $cfglen (mut i32) (i32.const 0))
  (data (i32.const 16) "_initialize was not called")
  (func (export "_initialize") (global.set $initialized (i32.const 1)))
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_init") (param $len i32) (result i32)
    (if (i32.eqz (global.get $initialized))
      (then (call $fail (i32.const 16) (i32.const 26)) (return (i32.const 1))))
    ;; the output envelope goes at 4096: u32 0 | u8 4 | u32 len | config
    (global.set $cfglen (call $input_read (i32.const 4105) (local.get $len)))
    (i32.const 0))
  (func (export "sy_handle") (param i32) (result i32)
    (i32.store (i32.const 4096) (i32.const 0))
    (i32.store8 (i32.const 4100) (i32.const 4))
    (i32.store (i32.const 4101) (global.get $cfglen))
    (drop (call $emit (i32.const 4096) (i32.add (i32.const 9) (global.get $cfglen))))
    (i32.const 0)))
