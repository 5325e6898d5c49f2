//go:build wasip1

package sdk

import "unsafe"

//go:wasmimport switchyard input_read
func inputRead(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport switchyard emit
func emit(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport switchyard fail
func fail(ptr unsafe.Pointer, n uint32)

//go:wasmimport switchyard log
func log(level int32, ptr unsafe.Pointer, n uint32)

func hostInputRead(b []byte) int32 {
	return inputRead(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)))
}

func hostEmit(b []byte) int32 {
	return emit(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)))
}

func hostFail(reason string) {
	fail(unsafe.Pointer(unsafe.StringData(reason)), uint32(len(reason)))
}

func hostLog(level int32, msg string) {
	log(level, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

//go:wasmexport sy_abi_version
func syABIVersion() int32 { return ABIVersion }

//go:wasmexport sy_init
func syInit(configLen int32) int32 { return callInit(configLen) }

//go:wasmexport sy_handle
func syHandle(eventLen int32) int32 { return callHandle(eventLen) }

//go:wasmimport switchyard state_get
func stateGet(kp unsafe.Pointer, kn uint32, bp unsafe.Pointer, bn uint32) int32

//go:wasmimport switchyard state_put
func statePut(kp unsafe.Pointer, kn uint32, vp unsafe.Pointer, vn uint32, ttlSeconds int32) int32

//go:wasmimport switchyard state_delete
func stateDelete(kp unsafe.Pointer, kn uint32) int32

func hostStateGet(key, buf []byte) int32 {
	return stateGet(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)), unsafe.Pointer(unsafe.SliceData(buf)), uint32(len(buf)))
}

func hostStatePut(key, value []byte, ttlSeconds int32) int32 {
	return statePut(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)), unsafe.Pointer(unsafe.SliceData(value)), uint32(len(value)), ttlSeconds)
}

func hostStateDelete(key []byte) int32 {
	return stateDelete(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)))
}
