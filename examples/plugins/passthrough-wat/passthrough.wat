;; passthrough-wat: the smallest useful Switchyard plugin (ABI v1).
;; It reads each event and emits one output that changes nothing: empty
;; destination (the event type's configured route) and flags 0 (key, headers
;; and data inherited). No config, no sy_init.
;;
;; Build: wat2wasm passthrough.wat -o passthrough.wasm
(module
  ;; The only imports a plugin may have come from "switchyard" (and
  ;; "wasi_snapshot_preview1"); the router refuses anything else.
  (import "switchyard" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "switchyard" "emit" (func $emit (param i32 i32) (result i32)))
  (import "switchyard" "fail" (func $fail (param i32 i32)))

  ;; One 64 KiB page to start; grown when an event does not fit.
  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0..5     the output envelope: str destination = u32 0 (empty), u8 flags = 0
  ;;   16..     failure reasons
  ;;   1024..   the input event (input_read copies it here)
  (data (i32.const 0) "\00\00\00\00\00")
  (data (i32.const 16) "passthrough-wat: bad event")   ;; 26 bytes
  (data (i32.const 48) "passthrough-wat: emit refused") ;; 29 bytes
  (data (i32.const 80) "passthrough-wat: out of memory") ;; 30 bytes
  (global $IN i32 (i32.const 1024))

  (func (export "sy_abi_version") (result i32)
    (i32.const 1))

  ;; sy_handle(event_len) -> 0 ok, 1 retry, 2 reject
  (func (export "sy_handle") (param $len i32) (result i32)
    (local $need i32)
    ;; make room for the event: need = IN + len bytes of memory
    (local.set $need (i32.add (global.get $IN) (local.get $len)))
    (if (i32.gt_u (local.get $need) (i32.mul (memory.size) (i32.const 65536)))
      (then
        (if (i32.lt_s
              (memory.grow
                (i32.sub
                  (i32.shr_u (i32.add (local.get $need) (i32.const 65535)) (i32.const 16))
                  (memory.size)))
              (i32.const 0))
          (then
            (call $fail (i32.const 80) (i32.const 30))
            (return (i32.const 1))))))           ;; retry
    ;; read the event; it must be all there and start with version 1
    (if (i32.or
          (i32.ne (call $input_read (global.get $IN) (local.get $len)) (local.get $len))
          (i32.ne (i32.load8_u (global.get $IN)) (i32.const 1)))
      (then
        (call $fail (i32.const 16) (i32.const 26))
        (return (i32.const 2))))                 ;; reject
    ;; one output, inheriting everything
    (if (i32.lt_s (call $emit (i32.const 0) (i32.const 5)) (i32.const 0))
      (then
        (call $fail (i32.const 48) (i32.const 29))
        (return (i32.const 1))))                 ;; retry
    (i32.const 0))                               ;; ok
)
