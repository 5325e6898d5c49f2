;; fanout: the event, unchanged, to the type's routes and to
;; nats.local:orders (which may be one of them), both under the input's id.
(module
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; str destination "" | flags 0: 5 bytes
  (data (i32.const 0) "\00\00\00\00\00")
  ;; str destination "nats.local:orders" | flags 0: 4 + 17 + 1 = 22 bytes
  (data (i32.const 16) "\11\00\00\00nats.local:orders\00")
  (func (export "sy_abi_version") (result i32) (i32.const 1))
  (func (export "sy_handle") (param i32) (result i32)
    (drop (call $emit (i32.const 0) (i32.const 5)))
    (drop (call $emit (i32.const 16) (i32.const 22)))
    (i32.const 0)))
