/* atrium_plugin.h must compile cleanly as C11 (see HeaderTests). */
#include "atrium_plugin.h"

static int32_t create(const atrium_host_api *host, const char *config, void **instance) {
    (void)host;
    (void)config;
    *instance = 0;
    return ATRIUM_OK;
}

static const atrium_plugin plugin = {
    .struct_size = sizeof(atrium_plugin),
    .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
    .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
    .name = "check",
    .version = "0",
    .flags = ATRIUM_PLUGIN_CONCURRENT,
    .create = create,
};

ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &plugin; }

int has_launch(const atrium_plugin *p) { return ATRIUM_HAS_FIELD(p, atrium_plugin, launch); }
