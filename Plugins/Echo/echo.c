/*
 * Echo: the reference C app service. Every message is answered with the same message,
 * unchanged. It uses nothing but atrium_plugin.h: no Atrium library is linked.
 *
 * Declared by manifests/echo.json as package atrium.examples.echo, service atrium.echo.
 */
#include "atrium_plugin.h"

/* The host's function table, kept from `create` for answering requests. */
typedef struct echo {
    const atrium_host_api *host;
} echo;

static echo the_echo;

static int32_t echo_create(const atrium_host_api *host, const char *config_json, void **instance) {
    (void)config_json;
    the_echo.host = host;
    *instance = &the_echo;
    host->log(host, ATRIUM_LOG_INFO, "echo ready");
    return ATRIUM_OK;
}

/* Answer with the request's own bytes: the host copies them before `respond` returns. */
static void echo_request(void *instance, uint64_t channel, uint64_t request, const uint8_t *message,
                         size_t length) {
    (void)channel;
    const atrium_host_api *host = ((echo *)instance)->host;
    host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, message, length, NULL);
}

static const atrium_plugin echo_plugin = {
    .struct_size = sizeof(atrium_plugin),
    .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
    .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
    .name = "Echo",
    .version = "1.0.0",
    /* No state, and `request` answers at once: safe to call concurrently, and on the host's
     * network thread. */
    .flags = ATRIUM_PLUGIN_CONCURRENT | ATRIUM_PLUGIN_NONBLOCKING,
    .create = echo_create,
    .destroy = NULL,
    .open = NULL, /* accept every channel */
    .request = echo_request,
    .response = NULL,
    .closed = NULL,
    .launch = NULL,
};

ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) {
    return &echo_plugin;
}
