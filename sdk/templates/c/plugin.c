/* __NAME__ sends each event on along its type's route with the header
 * "greeting" set (replacing one the event has), and filters out events whose type ends in ".noise". */
#include "switchyard.h"

static sy_str greeting = {"hello", 5}; /* config strings live as long as the instance */

static int32_t configure(const sy_config *cfg) {
    (void)cfg;
    sy_str g;
    if (sy_config_get("greeting", &g) && g.len > 0) greeting = g;
    return SY_OK;
}

static int ends_with(sy_str s, const char *suffix, uint32_t n) {
    if (s.len < n) return 0;
    for (uint32_t i = 0; i < n; i++)
        if (s.ptr[s.len - n + i] != suffix[i]) return 0;
    return 1;
}

static int32_t handle(const sy_event *ev) {
    if (ends_with(ev->type, ".noise", 6)) return SY_OK; /* no output: filtered */

    /* "" = the type's route; headers, when set, replace the input's: copy
     * them but a "greeting" the event has (a name given twice is refused),
     * and set it */
    sy_str name, value;
    uint32_t had = sy_pairs_get(&ev->headers, "greeting", &value) ? 1 : 0;
    sy_output_begin(SY_STR(""), SY_OUT_HEADERS);
    sy_output_headers(ev->headers.count - had + 1);
    sy_iter it = sy_pairs_iter(&ev->headers);
    while (sy_pairs_next(&it, &name, &value))
        if (!sy_str_eq(name, "greeting")) sy_output_header(name, value);
    sy_output_header(SY_STR("greeting"), greeting);
    if (sy_output_emit() < 0) return sy_reject("__NAME__: output refused");
    return SY_OK;
}

SY_INIT(configure)
SY_HANDLER(handle)
