// atrium_plugin.h must compile cleanly as C++17 (see HeaderTests).
#include "atrium_plugin.h"

#include <cstring>

static int32_t create(const atrium_host_api *, const char *, void **instance) {
    *instance = nullptr;
    return ATRIUM_OK;
}

static atrium_plugin make() {
    atrium_plugin plugin;
    std::memset(&plugin, 0, sizeof plugin);
    plugin.struct_size = sizeof(atrium_plugin);
    plugin.abi_major = ATRIUM_PLUGIN_ABI_MAJOR;
    plugin.abi_minor = ATRIUM_PLUGIN_ABI_MINOR;
    plugin.create = create;
    return plugin;
}

static const atrium_plugin plugin = make();

ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1() { return &plugin; }

bool has_launch(const atrium_plugin *p) { return ATRIUM_HAS_FIELD(p, atrium_plugin, launch); }
static_assert(sizeof(atrium_channel_info) >= sizeof(uint32_t), "layout");
