/*
 * switchyard.h — C guest SDK for Switchyard plugins (plugin ABI v1).
 *
 * One header, no library. Include it in exactly one .c file of the plugin
 * (it defines static functions and, through SY_HANDLER/SY_INIT, the module's
 * exports). Two ways to build:
 *
 *   with wasi-libc (malloc, snprintf, ...):
 *     clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *           -fuse-ld=lld -o plugin.wasm plugin.c
 *
 *   freestanding (no libc, smallest output, no imports but switchyard.*):
 *     clang --target=wasm32 -nostdlib -ffreestanding -DSY_FREESTANDING -O2 \
 *           -fuse-ld=lld -Wl,--no-entry -o plugin.wasm plugin.c
 *
 * A plugin:
 *
 *   #include "switchyard.h"
 *
 *   static int32_t on_event(const sy_event *ev) {
 *       if (sy_str_eq(ev->type, "debug.noise")) return SY_OK;   // dropped
 *       if (sy_forward() < 0) return sy_retry("emit refused");
 *       return SY_OK;
 *   }
 *   SY_HANDLER(on_event)
 *
 * Strings (sy_str) point into SDK buffers and are NOT NUL-terminated. An
 * event's strings are valid until the handler returns; the config's for the
 * life of the instance.
 */
#ifndef SWITCHYARD_H
#define SWITCHYARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SY_ABI_VERSION 1

/* Verdicts returned by a handler. */
#define SY_OK 0     /* publish the outputs (none = the event is dropped) */
#define SY_RETRY 1  /* transient failure: back off and retry */
#define SY_REJECT 2 /* permanent failure: dead-letter queue */

/* Log levels. */
#define SY_TRACE 0
#define SY_DEBUG 1
#define SY_INFO 2
#define SY_WARN 3
#define SY_ERROR 4

/* Output flags: which optional fields follow the destination. */
#define SY_OUT_KEY 1u
#define SY_OUT_HEADERS 2u
#define SY_OUT_DATA 4u
#define SY_OUT_ID 8u

/* Returned by sy_output_emit when the SDK itself refused the output (built
 * in the wrong order, or out of memory) before asking the host. */
#define SY_ERR_BUILD (-1000)

/* ---- host imports (module "switchyard") ------------------------------- */

#define SY__IMPORT(name) __attribute__((import_module("switchyard"), import_name(name)))
SY__IMPORT("input_read") int32_t sy__input_read(void *ptr, uint32_t len);
SY__IMPORT("emit") int32_t sy__emit(const void *ptr, uint32_t len);
SY__IMPORT("fail") void sy__fail(const void *ptr, uint32_t len);
SY__IMPORT("log") void sy__log(int32_t level, const void *ptr, uint32_t len);
/* optional: plugin state (imported only by a plugin that calls sy_state_*) */
SY__IMPORT("state_get") int32_t sy__state_get(const void *kp, uint32_t kn, void *bp, uint32_t bn);
SY__IMPORT("state_put") int32_t sy__state_put(const void *kp, uint32_t kn, const void *vp, uint32_t vn, int32_t ttl);
SY__IMPORT("state_delete") int32_t sy__state_delete(const void *kp, uint32_t kn);

/* ---- strings ---------------------------------------------------------- */

typedef struct {
    const char *ptr;
    uint32_t len;
} sy_str;

#define SY_STR(literal) ((sy_str){(literal), (uint32_t)(sizeof(literal) - 1)})

static inline uint32_t sy__strlen(const char *s) {
    uint32_t n = 0;
    while (s[n]) n++;
    return n;
}

/* A sy_str for a NUL-terminated C string. */
static inline sy_str sy_cstr(const char *s) {
    sy_str r = {s, sy__strlen(s)};
    return r;
}

static inline int sy_str_eqs(sy_str a, sy_str b) {
    if (a.len != b.len) return 0;
    for (uint32_t i = 0; i < a.len; i++)
        if (a.ptr[i] != b.ptr[i]) return 0;
    return 1;
}

/* sy_str_eq(s, "text"): s equals the NUL-terminated string. */
static inline int sy_str_eq(sy_str a, const char *b) { return sy_str_eqs(a, sy_cstr(b)); }

/* A header name the router accepts in an output: 1 to 64 lower-case ASCII
 * letters and digits (a CloudEvents extension name), and not one of the
 * CloudEvents context attributes (id, source, type, ...). */
static inline int sy_valid_header_name(sy_str name) {
    static const char *const context[] = {"specversion", "id", "source", "type", "subject",
                                          "time", "datacontenttype", "dataschema", "data"};
    if (name.len == 0 || name.len > 64) return 0;
    for (uint32_t i = 0; i < name.len; i++) {
        char c = name.ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 0;
    }
    for (uint32_t i = 0; i < sizeof context / sizeof context[0]; i++)
        if (sy_str_eq(name, context[i])) return 0;
    return 1;
}

/* ---- logging and failure reasons -------------------------------------- */

static inline void sy_log_str(int32_t level, sy_str msg) { sy__log(level, msg.ptr, msg.len); }
static inline void sy_log(int32_t level, const char *msg) { sy_log_str(level, sy_cstr(msg)); }

/* Record a reason and return the verdict: `return sy_retry("broker down");` */
static inline int32_t sy_retry_str(sy_str reason) {
    sy__fail(reason.ptr, reason.len);
    return SY_RETRY;
}
static inline int32_t sy_reject_str(sy_str reason) {
    sy__fail(reason.ptr, reason.len);
    return SY_REJECT;
}
static inline int32_t sy_retry(const char *reason) { return sy_retry_str(sy_cstr(reason)); }
static inline int32_t sy_reject(const char *reason) { return sy_reject_str(sy_cstr(reason)); }

/* ---- memory ----------------------------------------------------------- */
/* The SDK keeps two growable buffers (input, output) and never frees them.
 * With libc they come from realloc; freestanding, from memory.grow. */

#if defined(SY_FREESTANDING)
/* Clang may emit calls to these even without libc; weak, so that a plugin
 * or another library can bring its own. */
__attribute__((weak)) void *memcpy(void *dst, const void *src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    while (n--) *d++ = *s++;
    return dst;
}
__attribute__((weak)) void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if (d < s) {
        while (n--) *d++ = *s++;
    } else {
        while (n--) d[n] = s[n];
    }
    return dst;
}
__attribute__((weak)) void *memset(void *dst, int c, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}
__attribute__((weak)) int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (; n; n--, x++, y++)
        if (*x != *y) return *x - *y;
    return 0;
}

/* Fresh pages at the end of linear memory. */
static inline void *sy__pages(uint32_t size) {
    uint32_t pages = (size + 65535u) / 65536u;
    if (pages == 0) pages = 1;
    int32_t old = __builtin_wasm_memory_grow(0, pages);
    if (old < 0) return 0;
    return (void *)((uintptr_t)old * 65536u);
}

static inline uint8_t *sy__grow(uint8_t *old, uint32_t used, uint32_t *cap, uint32_t need) {
    uint32_t ncap = *cap ? *cap : 4096;
    while (ncap < need) ncap *= 2;
    ncap = (ncap + 65535u) & ~65535u; /* whole pages */
    uint8_t *p = (uint8_t *)sy__pages(ncap);
    if (!p) return 0;
    if (used) __builtin_memcpy(p, old, used); /* the old region is abandoned */
    *cap = ncap;
    return p;
}
#else
#include <stdlib.h>
#include <string.h>
static inline uint8_t *sy__grow(uint8_t *old, uint32_t used, uint32_t *cap, uint32_t need) {
    (void)used;
    uint32_t ncap = *cap ? *cap : 4096;
    while (ncap < need) ncap *= 2;
    uint8_t *p = (uint8_t *)realloc(old, ncap);
    if (!p) return 0;
    *cap = ncap;
    return p;
}
#endif

/* ---- decoding --------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
} sy__rd;

static inline uint32_t sy__le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline int sy__u32(sy__rd *r, uint32_t *v) {
    if (r->end - r->p < 4) return 0;
    *v = sy__le32(r->p);
    r->p += 4;
    return 1;
}

static inline int sy__str(sy__rd *r, sy_str *s) {
    uint32_t n;
    if (!sy__u32(r, &n) || (uint32_t)(r->end - r->p) < n) return 0;
    s->ptr = (const char *)r->p;
    s->len = n;
    r->p += n;
    return 1;
}

/* A list of (name, value) pairs: an event's headers, or the config. */
typedef struct {
    uint32_t count;
    const uint8_t *raw; /* the first pair's bytes (already validated) */
    uint32_t raw_len;
} sy_pairs;

static inline int sy__pairs(sy__rd *r, sy_pairs *ps) {
    uint32_t n;
    if (!sy__u32(r, &n)) return 0;
    const uint8_t *start = r->p;
    sy_str a, b;
    for (uint32_t i = 0; i < n; i++)
        if (!sy__str(r, &a) || !sy__str(r, &b)) return 0;
    ps->count = n;
    ps->raw = start;
    ps->raw_len = (uint32_t)(r->p - start);
    return 1;
}

/* Iteration:
 *   sy_iter it = sy_pairs_iter(&ev->headers); sy_str k, v;
 *   while (sy_pairs_next(&it, &k, &v)) { ... }                               */
typedef struct {
    sy__rd r;
    uint32_t left;
} sy_iter;

static inline sy_iter sy_pairs_iter(const sy_pairs *ps) {
    sy_iter it = {{ps->raw, ps->raw + ps->raw_len}, ps->count};
    return it;
}

static inline int sy_pairs_next(sy_iter *it, sy_str *name, sy_str *value) {
    if (!it->left) return 0;
    it->left--;
    return sy__str(&it->r, name) && sy__str(&it->r, value);
}

/* The first value called name; returns 0 when there is none. */
static inline int sy_pairs_get(const sy_pairs *ps, const char *name, sy_str *value) {
    sy_str want = sy_cstr(name), k, v;
    sy_iter it = sy_pairs_iter(ps);
    while (sy_pairs_next(&it, &k, &v))
        if (sy_str_eqs(k, want)) {
            *value = v;
            return 1;
        }
    return 0;
}

typedef struct {
    sy_str id, type, source, subject, key;
    sy_pairs headers;
    sy_str data;
} sy_event;

/* The config is sy_pairs sorted by key. */
typedef sy_pairs sy_config;

static inline int sy__decode_event(const uint8_t *b, uint32_t n, sy_event *ev) {
    sy__rd r = {b, b + n};
    if (n < 1 || b[0] != 1) return 0;
    r.p++;
    if (!sy__str(&r, &ev->id) || !sy__str(&r, &ev->type) || !sy__str(&r, &ev->source) ||
        !sy__str(&r, &ev->subject) || !sy__str(&r, &ev->key) || !sy__pairs(&r, &ev->headers) ||
        !sy__str(&r, &ev->data))
        return 0;
    return r.p == r.end;
}

/* ---- output builder --------------------------------------------------- */
/* One output at a time, written in envelope order (key, headers, data, id):
 *   sy_output_begin(SY_STR("nats.local:x"), SY_OUT_HEADERS | SY_OUT_DATA | SY_OUT_ID);
 *   sy_output_headers(2);
 *   sy_output_header(SY_STR("a"), SY_STR("1"));
 *   sy_output_header(SY_STR("b"), SY_STR("2"));
 *   sy_output_data(ev->data);
 *   sy_output_derived_id(ev->id, i);   (or sy_output_id(SY_STR("...")))
 *   if (sy_output_emit() < 0) return sy_retry("output refused");
 * A field whose flag is not set inherits the input's; headers, when set,
 * replace all of the input's. Outputs of one event that go the same way are
 * distinct events and need distinct ids: with the input's id, a consumer
 * that drops repeated events (by source and id) keeps only the first. */

static struct {
    uint8_t *buf;
    uint32_t len, cap;
    uint32_t flags, stage, headers_left;
    uint32_t written; /* the SY_OUT_* parts written so far */
    int err;
} sy__out;

static inline void sy__put(const void *p, uint32_t n) {
    if (sy__out.err) return;
    if (sy__out.cap - sy__out.len < n) {
        uint8_t *nb = sy__grow(sy__out.buf, sy__out.len, &sy__out.cap, sy__out.len + n);
        if (!nb) {
            sy__out.err = 1;
            return;
        }
        sy__out.buf = nb;
    }
    if (n) __builtin_memcpy(sy__out.buf + sy__out.len, p, n);
    sy__out.len += n;
}

static inline void sy__put_u32(uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    sy__put(b, 4);
}

static inline void sy__put_str(sy_str s) {
    sy__put_u32(s.len);
    sy__put(s.ptr, s.len);
}

/* Stages: 1 key, 2 headers count, 3 data, 4 id, each at most once and in order. */
static inline int sy__stage(uint32_t flag, uint32_t stage) {
    if (!(sy__out.flags & flag) || sy__out.stage >= stage || sy__out.headers_left) {
        sy__out.err = 1;
        return 0;
    }
    sy__out.stage = stage;
    sy__out.written |= flag;
    return 1;
}

static inline void sy_output_begin(sy_str destination, uint32_t flags) {
    sy__out.len = 0;
    sy__out.err = (flags & ~15u) != 0;
    sy__out.flags = flags;
    sy__out.stage = 0;
    sy__out.written = 0;
    sy__out.headers_left = 0;
    sy__put_str(destination);
    uint8_t f = (uint8_t)flags;
    sy__put(&f, 1);
}

static inline void sy_output_key(sy_str key) {
    if (sy__stage(SY_OUT_KEY, 1)) sy__put_str(key);
}

static inline void sy_output_headers(uint32_t count) {
    if (sy__stage(SY_OUT_HEADERS, 2)) {
        sy__put_u32(count);
        sy__out.headers_left = count;
    }
}

static inline void sy_output_header(sy_str name, sy_str value) {
    if (sy__out.stage != 2 || sy__out.headers_left == 0) {
        sy__out.err = 1;
        return;
    }
    sy__out.headers_left--;
    sy__put_str(name);
    sy__put_str(value);
}

static inline void sy_output_data(sy_str data) {
    if (sy__stage(SY_OUT_DATA, 3)) sy__put_str(data);
}

/* The output's CloudEvents id (1 to 1024 bytes, no control characters). */
static inline void sy_output_id(sy_str id) {
    if (sy__stage(SY_OUT_ID, 4)) sy__put_str(id);
}

/* The id "<base>/<n>", for output n of the event whose id is base: derived,
 * so that a retry of the event gives the same ids. */
static inline void sy_output_derived_id(sy_str base, uint32_t n) {
    char digits[10];
    uint32_t k = 0;
    do {
        digits[sizeof digits - 1 - k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    if (sy__stage(SY_OUT_ID, 4)) {
        sy__put_u32(base.len + 1 + k);
        sy__put(base.ptr, base.len);
        sy__put("/", 1);
        sy__put(digits + sizeof digits - k, k);
    }
}

/* Set when an sy_output_emit of the event being handled returned
 * SY_ERR_BUILD: the event is then rejected (sy__dispatch_event), as the
 * host rejects one whose output it refuses, not sent without that output. */
static int sy__build_failed;

/* Hands the output to the router: >= 0 accepted; < 0 refused by the host
 * (malformed, over limits: the event is rejected) or SY_ERR_BUILD (fields
 * missing or out of order, out of memory: the event is rejected too, with
 * a reason that says so, unless the handler answers retry or reject). */
static inline int32_t sy_output_emit(void) {
    if (sy__out.err || sy__out.written != sy__out.flags || sy__out.headers_left) {
        sy__build_failed = 1;
        return SY_ERR_BUILD;
    }
    return sy__emit(sy__out.buf, sy__out.len);
}

/* The input event, unchanged, to the type's configured route. */
static inline int32_t sy_forward(void) {
    static const uint8_t env[5] = {0, 0, 0, 0, 0};
    return sy__emit(env, 5);
}

/* The input event, unchanged, to another destination. */
static inline int32_t sy_emit_to(sy_str destination) {
    sy_output_begin(destination, 0);
    return sy_output_emit();
}

/* ---- entry points ----------------------------------------------------- */

static struct {
    uint8_t *buf;
    uint32_t cap;
} sy__in;

static sy_config sy__config; /* empty until sy_init */

/* The plugin's config (for the life of the instance). */
static inline const sy_config *sy_config_all(void) { return &sy__config; }

/* Looks a config key up: returns 1 and sets value when present. */
static inline int sy_config_get(const char *key, sy_str *value) {
    return sy_pairs_get(&sy__config, key, value);
}

static inline int32_t sy__read_input(uint32_t n) {
    if (n > sy__in.cap) {
        uint8_t *b = sy__grow(sy__in.buf, 0, &sy__in.cap, n);
        if (!b) return -1;
        sy__in.buf = b;
    }
    return sy__input_read(sy__in.buf, n) == (int32_t)n ? 0 : -1;
}

static inline int32_t sy__dispatch_init(int32_t n, int32_t (*fn)(const sy_config *)) {
    uint32_t cap = 0;
    if (n < 4) return sy_reject("switchyard sdk: malformed config envelope");
    /* The config keeps its own buffer: its strings live as long as the instance. */
    uint8_t *b = sy__grow(0, 0, &cap, (uint32_t)n);
    if (!b) return sy_retry("switchyard sdk: out of memory reading the config");
    if (sy__input_read(b, (uint32_t)n) != n) return sy_retry("switchyard sdk: config size mismatch");
    sy__rd r = {b, b + n};
    if (!sy__pairs(&r, &sy__config) || r.p != r.end) return sy_reject("switchyard sdk: malformed config envelope");
    return fn ? fn(&sy__config) : SY_OK;
}

static inline int32_t sy__dispatch_event(int32_t n, int32_t (*fn)(const sy_event *)) {
    sy_event ev;
    if (n < 0 || sy__read_input((uint32_t)n) < 0) return sy_retry("switchyard sdk: cannot read the event");
    if (!sy__decode_event(sy__in.buf, (uint32_t)n, &ev)) return sy_reject("switchyard sdk: malformed event envelope");
    sy__build_failed = 0;
    int32_t rc = fn(&ev);
    if (rc == SY_OK && sy__build_failed)
        return sy_reject("switchyard sdk: an output could not be built (sy_output_* parts missing, out of order or "
                         "not flagged, a header count not met, or out of memory): the event is rejected, not sent without it");
    return rc;
}

/* SY_HANDLER(fn): exports sy_abi_version and sy_handle, calling
 *   int32_t fn(const sy_event *ev)   -> SY_OK, SY_RETRY or SY_REJECT        */
#define SY_HANDLER(fn)                                                                          \
    __attribute__((export_name("sy_abi_version"))) int32_t sy_abi_version(void) { return SY_ABI_VERSION; } \
    __attribute__((export_name("sy_handle"))) int32_t sy_handle(int32_t event_len) {           \
        return sy__dispatch_event(event_len, fn);                                               \
    }

/* SY_INIT(fn): exports sy_init, calling once per instance
 *   int32_t fn(const sy_config *cfg) -> SY_OK, or non-zero (after sy_retry/
 *   sy_reject with a reason) to fail loading the plugin.
 * Without SY_INIT the config is not read (sy_config_get finds nothing). */
#define SY_INIT(fn)                                                                             \
    __attribute__((export_name("sy_init"))) int32_t sy_init(int32_t config_len) {              \
        return sy__dispatch_init(config_len, fn);                                               \
    }

/* ---- plugin state (docs/plugin-state.md) ------------------------------ */

/* A key-value store per plugin and event type in the router's data file;
 * a write counts when the event reaches its outcome. */
#define SY_STATE_OK 0
#define SY_STATE_NOT_FOUND (-1)
#define SY_STATE_FAILED (-2) /* answer with sy_retry */

/* sy_state_get copies up to cap bytes of key's value to buf and returns the
 * value's length (call again with a larger buf when it is over cap),
 * SY_STATE_NOT_FOUND or SY_STATE_FAILED. */
static inline int32_t sy_state_get(sy_str key, void *buf, uint32_t cap) {
    return sy__state_get(key.ptr, key.len, buf, cap);
}

/* sy_state_put sets key to value for ttl_seconds (0: no expiry); a write
 * over a limit (keys 1-256 bytes, values up to 64 KiB, 100,000 keys or
 * 64 MiB per namespace) rejects the event. */
static inline int32_t sy_state_put(sy_str key, sy_str value, uint32_t ttl_seconds) {
    return sy__state_put(key.ptr, key.len, value.ptr, value.len, (int32_t)(ttl_seconds > 0x7fffffff ? 0x7fffffff : ttl_seconds));
}

/* sy_state_delete removes key (SY_STATE_OK also when it was not there). */
static inline int32_t sy_state_delete(sy_str key) {
    return sy__state_delete(key.ptr, key.len);
}

#ifdef __cplusplus
}
#endif
#endif /* SWITCHYARD_H */
