/* Native unit test of switchyard.h: the host imports are defined here, so the
 * header's decoding and output building run on the build machine.
 *   clang -std=c99 -Wall -Wextra -Wno-unknown-attributes -o sdk_test sdk_test.c && ./sdk_test
 * (examples/plugins/build.sh --check runs it.) */
#include <stdio.h>
#include <string.h>

#include "../switchyard.h"

static uint8_t input[4096];
static uint32_t input_len;
static uint8_t emitted[4096];
static uint32_t emitted_len;
static int emits;
static char reason[256];

int32_t sy__input_read(void *ptr, uint32_t len) {
    memcpy(ptr, input, len < input_len ? len : input_len);
    return (int32_t)input_len;
}
int32_t sy__emit(const void *ptr, uint32_t len) {
    memcpy(emitted, ptr, len);
    emitted_len = len;
    emits++;
    return 0;
}
void sy__fail(const void *ptr, uint32_t len) {
    memcpy(reason, ptr, len);
    reason[len] = 0;
}
void sy__log(int32_t level, const void *ptr, uint32_t len) {
    (void)level, (void)ptr, (void)len;
}
/* One key of state is enough for the test. */
static char state_key[64], state_val[64];
static uint32_t state_key_len, state_val_len;
static int state_set;
int32_t sy__state_get(const void *kp, uint32_t kn, void *bp, uint32_t bn) {
    if (!state_set || kn != state_key_len || memcmp(kp, state_key, kn) != 0) return SY_STATE_NOT_FOUND;
    memcpy(bp, state_val, bn < state_val_len ? bn : state_val_len);
    return (int32_t)state_val_len;
}
int32_t sy__state_put(const void *kp, uint32_t kn, const void *vp, uint32_t vn, int32_t ttl) {
    (void)ttl;
    memcpy(state_key, kp, kn), state_key_len = kn;
    memcpy(state_val, vp, vn), state_val_len = vn;
    state_set = 1;
    return SY_STATE_OK;
}
int32_t sy__state_delete(const void *kp, uint32_t kn) {
    if (state_set && kn == state_key_len && memcmp(kp, state_key, kn) == 0) state_set = 0;
    return SY_STATE_OK;
}

static int failures, passes;
#define CHECK(c)                                                   \
    do {                                                           \
        if (!(c)) {                                                \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);    \
            failures++;                                            \
        } else {                                                   \
            passes++;                                              \
        }                                                          \
    } while (0)

static void put_u32(uint32_t v) {
    memcpy(input + input_len, &v, 4); /* the test machine is little-endian */
    input_len += 4;
}
static void put_str(const char *s) {
    uint32_t n = (uint32_t)strlen(s);
    put_u32(n);
    memcpy(input + input_len, s, n);
    input_len += n;
}

static sy_event seen;
static int32_t handler(const sy_event *ev) {
    seen = *ev;
    if (sy_str_eq(ev->type, "drop")) return SY_OK;
    if (sy_str_eq(ev->type, "badout")) { /* announces 1 header, writes none, ignores the verdict */
        sy_output_begin(SY_STR(""), SY_OUT_HEADERS);
        sy_output_headers(1);
        sy_output_emit();
        return SY_OK;
    }
    return sy_forward() < 0 ? SY_RETRY : SY_OK;
}
static int32_t on_config(const sy_config *cfg) {
    sy_str v;
    return (cfg->count == 2 && sy_config_get("b", &v) && sy_str_eq(v, "2")) ? SY_OK : sy_reject("bad");
}
SY_INIT(on_config)
SY_HANDLER(handler)

static void event(const char *type, uint32_t nheaders) {
    input_len = 0;
    input[input_len++] = 1;
    put_str("id-1");
    put_str(type);
    put_str("src");
    put_str("");
    put_str("key");
    put_u32(nheaders);
    for (uint32_t i = 0; i < nheaders; i++) {
        put_str("h");
        put_str("v");
    }
    put_str("{\"a\":1}");
}

int main(void) {
    /* config */
    input_len = 0;
    put_u32(2);
    put_str("a"), put_str("1"), put_str("b"), put_str("2");
    CHECK(sy_init((int32_t)input_len) == SY_OK);
    sy_str v;
    CHECK(sy_config_get("a", &v) && sy_str_eq(v, "1"));
    CHECK(!sy_config_get("c", &v));

    /* decode + forward */
    event("t", 2);
    emits = 0;
    CHECK(sy_handle((int32_t)input_len) == SY_OK);
    CHECK(emits == 1 && emitted_len == 5);
    CHECK(sy_str_eq(seen.id, "id-1") && sy_str_eq(seen.key, "key") && seen.subject.len == 0);
    CHECK(seen.headers.count == 2 && sy_pairs_get(&seen.headers, "h", &v) && sy_str_eq(v, "v"));
    CHECK(sy_str_eq(seen.data, "{\"a\":1}"));

    /* drop */
    event("drop", 0);
    emits = 0;
    CHECK(sy_handle((int32_t)input_len) == SY_OK && emits == 0);

    /* an output that could not be built rejects the event, with a reason
     * (it ended "filtered", without a word: a plugin author's trial) */
    event("badout", 0);
    emits = 0;
    reason[0] = 0;
    CHECK(sy_handle((int32_t)input_len) == SY_REJECT && emits == 0 && strstr(reason, "could not be built") != NULL);
    event("t", 0); /* and the next event is not */
    CHECK(sy_handle((int32_t)input_len) == SY_OK && emits == 1);

    /* malformed: every truncation is rejected */
    event("t", 1);
    uint32_t full = input_len;
    for (uint32_t n = 0; n < full; n++) {
        input_len = n;
        CHECK(sy_handle((int32_t)n) == SY_REJECT);
    }
    input_len = full + 1;
    CHECK(sy_handle((int32_t)input_len) == SY_REJECT); /* trailing byte */

    /* output builder */
    sy_output_begin(SY_STR("nats.local:x"), SY_OUT_KEY | SY_OUT_HEADERS | SY_OUT_DATA);
    sy_output_key(SY_STR("k"));
    sy_output_headers(1);
    sy_output_header(SY_STR("a"), SY_STR("b"));
    sy_output_data(SY_STR("d"));
    CHECK(sy_output_emit() == 0);
    static const uint8_t want[] = {12, 0, 0, 0, 'n', 'a', 't', 's', '.', 'l', 'o', 'c', 'a', 'l', ':', 'x', 7,
                                   1, 0, 0, 0, 'k', 1, 0, 0, 0, 1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b',
                                   1, 0, 0, 0, 'd'};
    CHECK(emitted_len == sizeof want && memcmp(emitted, want, sizeof want) == 0);

    sy_output_begin(SY_STR(""), SY_OUT_DATA | SY_OUT_KEY); /* data before key */
    sy_output_data(SY_STR("d"));
    sy_output_key(SY_STR("k"));
    CHECK(sy_output_emit() == SY_ERR_BUILD);
    sy_output_begin(SY_STR(""), SY_OUT_HEADERS); /* fewer headers than announced */
    sy_output_headers(2);
    sy_output_header(SY_STR("a"), SY_STR("b"));
    CHECK(sy_output_emit() == SY_ERR_BUILD);
    sy_output_begin(SY_STR(""), SY_OUT_KEY); /* flagged part missing */
    CHECK(sy_output_emit() == SY_ERR_BUILD);
    sy_output_begin(SY_STR(""), 0); /* part not flagged */
    sy_output_data(SY_STR("x"));
    CHECK(sy_output_emit() == SY_ERR_BUILD);
    sy_output_begin(SY_STR(""), 16); /* unknown flag */
    CHECK(sy_output_emit() == SY_ERR_BUILD);

    /* the id comes last, after the data; a derived one is "<base>/<n>" */
    sy_output_begin(SY_STR(""), SY_OUT_DATA | SY_OUT_ID);
    sy_output_data(SY_STR("d"));
    sy_output_id(SY_STR("i"));
    CHECK(sy_output_emit() == 0);
    static const uint8_t want_id[] = {0, 0, 0, 0, 12, 1, 0, 0, 0, 'd', 1, 0, 0, 0, 'i'};
    CHECK(emitted_len == sizeof want_id && memcmp(emitted, want_id, sizeof want_id) == 0);
    sy_output_begin(SY_STR(""), SY_OUT_ID);
    sy_output_derived_id(SY_STR("e-1"), 407);
    CHECK(sy_output_emit() == 0);
    static const uint8_t want_derived[] = {0, 0, 0, 0, 8, 7, 0, 0, 0, 'e', '-', '1', '/', '4', '0', '7'};
    CHECK(emitted_len == sizeof want_derived && memcmp(emitted, want_derived, sizeof want_derived) == 0);
    sy_output_begin(SY_STR(""), SY_OUT_ID);
    sy_output_derived_id(SY_STR("e"), 0);
    CHECK(sy_output_emit() == 0 && emitted_len == 12 && memcmp(emitted + 9, "e/0", 3) == 0);
    sy_output_begin(SY_STR(""), SY_OUT_DATA | SY_OUT_ID); /* data flagged, not written */
    sy_output_derived_id(SY_STR("e"), 1);
    CHECK(sy_output_emit() == SY_ERR_BUILD);
    sy_output_begin(SY_STR(""), SY_OUT_KEY | SY_OUT_DATA); /* key flagged, not written */
    sy_output_data(SY_STR("d"));
    CHECK(sy_output_emit() == SY_ERR_BUILD);
    sy_output_begin(SY_STR(""), SY_OUT_ID | SY_OUT_DATA); /* id before data */
    sy_output_id(SY_STR("i"));
    sy_output_data(SY_STR("d"));
    CHECK(sy_output_emit() == SY_ERR_BUILD);

    CHECK(sy_valid_header_name(SY_STR("region")) && sy_valid_header_name(SY_STR("x9")));
    CHECK(!sy_valid_header_name(SY_STR("")) && !sy_valid_header_name(SY_STR("a-b")) &&
          !sy_valid_header_name(SY_STR("Region")) && !sy_valid_header_name(SY_STR("type")));

    /* state */
    char buf[8];
    CHECK(sy_state_get(SY_STR("n"), buf, sizeof buf) == SY_STATE_NOT_FOUND);
    CHECK(sy_state_put(SY_STR("n"), SY_STR("hello world"), 0) == SY_STATE_OK);
    CHECK(sy_state_get(SY_STR("n"), buf, sizeof buf) == 11 && memcmp(buf, "hello wo", 8) == 0);
    CHECK(sy_state_delete(SY_STR("n")) == SY_STATE_OK && sy_state_get(SY_STR("n"), buf, sizeof buf) == SY_STATE_NOT_FOUND);

    printf("c-sdk: %d passed, %d failed\n", passes, failures);
    return failures != 0;
}
