/*
 * enrich-c: adds headers from its config to every event.
 *
 * Every config entry becomes a header: config = { region = "eu-1" } gives each
 * event the header region=eu-1. A header the event already has under that
 * name is replaced; the others pass through unchanged, in their order, before
 * the added ones. Key, data and destination are inherited (the event type's
 * route).
 *
 * Header names are CloudEvents extension names: 1 to 64 lower-case letters
 * and digits, not a context attribute (id, type, source, ...); any other
 * config key refuses to load the plugin.
 */
#include "../../../sdk/c/switchyard.h"

static int32_t configure(const sy_config *cfg) {
    sy_str k, v;
    sy_iter it = sy_pairs_iter(cfg);
    while (sy_pairs_next(&it, &k, &v))
        if (!sy_valid_header_name(k))
            return sy_reject("enrich-c: config keys become header names: 1 to 64 lower-case letters and "
                             "digits, not a CloudEvents context attribute (id, type, source, ...)");
    if (cfg->count == 0) sy_log(SY_WARN, "enrich-c: empty config, events pass through unchanged");
    return SY_OK;
}

static int in_config(sy_str name) {
    sy_str k, v;
    sy_iter it = sy_pairs_iter(sy_config_all());
    while (sy_pairs_next(&it, &k, &v))
        if (sy_str_eqs(k, name)) return 1;
    return 0;
}

static int32_t enrich(const sy_event *ev) {
    const sy_config *cfg = sy_config_all();
    sy_str k, v;
    sy_iter it;

    uint32_t kept = 0;
    it = sy_pairs_iter(&ev->headers);
    while (sy_pairs_next(&it, &k, &v))
        if (!in_config(k)) kept++;

    sy_output_begin(SY_STR(""), SY_OUT_HEADERS);
    sy_output_headers(kept + cfg->count);
    it = sy_pairs_iter(&ev->headers);
    while (sy_pairs_next(&it, &k, &v))
        if (!in_config(k)) sy_output_header(k, v);
    it = sy_pairs_iter(cfg);
    while (sy_pairs_next(&it, &k, &v)) sy_output_header(k, v);
    if (sy_output_emit() < 0) return sy_retry("enrich-c: output refused");
    return SY_OK;
}

SY_INIT(configure)
SY_HANDLER(enrich)
