/*
 * atrium_plugin.h: the Atrium plugin ABI, version 1.
 *
 * An Atrium app service is a shared library that exports one C function,
 *
 *     ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { ... }
 *
 * whose name carries the ABI major version. It returns a descriptor (atrium_plugin) that
 * begins with its own size and the ABI version it was built against, followed by the
 * plugin's callbacks. The host hands the plugin a table of host functions
 * (atrium_host_api): answering requests, sending messages to the client, closing channels,
 * launching URIs, logging, and reading and building messages without parsing CBOR.
 *
 * Rules that keep old plugins and new hosts (and the reverse) working together:
 *   - Every struct starts with `struct_size` and only ever grows at its end. Before using a
 *     field, check that `struct_size` covers it (ATRIUM_HAS_FIELD).
 *   - The host refuses a plugin whose abi_major differs from its own, or whose abi_minor is
 *     newer than its own, with the reason in its log and in `atriumd --check`.
 *   - Only C types cross the boundary. Messages cross as CBOR bytes: one map, encoded as the
 *     Atrium ValueSet (docs/PROTOCOL.md section 3).
 *   - The plugin never links against host symbols: everything it calls is in the table.
 *
 * Threads. Every callback and host function below is tagged with where it runs or may be
 * called:
 *   [plugin queue]  a callback, called on the plugin instance's own serial queue: never two
 *                   at once, never on a network thread. `create` and `destroy` always run
 *                   there; so do `open`, `closed` and `launch`.
 *   [requests]      `request` and `response`: on the plugin queue, or, when the plugin sets
 *                   ATRIUM_PLUGIN_CONCURRENT (or its manifest says "concurrent": true), on
 *                   a concurrent queue, at the same time as each other and themselves; with
 *                   ATRIUM_PLUGIN_NONBLOCKING as well, `request` runs on the thread that
 *                   received it (a network thread, or in a worker process the thread that
 *                   reads the host's socket).
 *   [any thread]    a host function the plugin may call from any thread, its own included,
 *                   at any time between `create` returning and `destroy` being called.
 *   [may block]     a host function that waits for the host (a launch); never call it from
 *                   a nonblocking `request`.
 * A plugin in a worker process ("isolation": "process") sees the same rules.
 *
 * Lifetimes: what a plugin may keep after a callback returns.
 *   - The host table (`host` in `create`) and its functions: until `destroy` returns.
 *   - A channel id: until `closed` is called for it. A request id: until it is answered
 *     (by `respond`, or by the host: late answers get ATRIUM_E_UNKNOWN_REQUEST, harmlessly).
 *   - Everything a callback is handed by pointer (`config_json`, `atrium_channel_info`,
 *     `atrium_launch_info` and their strings, a request's or response's message bytes) is
 *     borrowed: valid only until the callback returns. Copy what you keep.
 *   - A parsed message, and the strings and bytes read from it: until `message_free`. A
 *     builder's bytes: until its next put or `builder_free`.
 *   - A pointer the plugin passes to a host function is only read during the call (the host
 *     copies it): free or reuse it as soon as the function returns.
 *
 * Compiles as C11 and C++17.
 */
#ifndef ATRIUM_PLUGIN_H
#define ATRIUM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATRIUM_PLUGIN_ABI_MAJOR 1
#define ATRIUM_PLUGIN_ABI_MINOR 3

/* The exported entry symbol, as a string, for dlsym. */
#define ATRIUM_PLUGIN_ENTRY_SYMBOL "atrium_plugin_entry_v1"

/* Exports the entry function from the library, whatever the compiler's default visibility
 * (-fvisibility=hidden included) and in C++ too:
 *     ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &my_plugin; } */
#if defined(_WIN32)
#define ATRIUM_PLUGIN_VISIBLE __declspec(dllexport)
#else
#define ATRIUM_PLUGIN_VISIBLE __attribute__((visibility("default")))
#endif
#ifdef __cplusplus
#define ATRIUM_PLUGIN_EXPORT extern "C" ATRIUM_PLUGIN_VISIBLE
#else
#define ATRIUM_PLUGIN_EXPORT ATRIUM_PLUGIN_VISIBLE
#endif

/* Whether a struct that starts with struct_size holds `field` (for structs from the other
 * side, which may be older or newer than this header). */
#define ATRIUM_HAS_FIELD(pointer, type, field) \
    ((pointer)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* ---- Return codes of host functions: 0 or a negative error. ---- */
#define ATRIUM_OK 0
#define ATRIUM_E_INVALID_ARGUMENT (-1)  /* a NULL pointer, a bad length, a status out of range */
#define ATRIUM_E_UNKNOWN_REQUEST (-2)   /* already answered, timed out, or its client went away */
#define ATRIUM_E_UNKNOWN_CHANNEL (-3)   /* never opened, or closed by now */
#define ATRIUM_E_NOT_A_VALUESET (-4)    /* the bytes are not a valid ValueSet */
#define ATRIUM_E_NOT_FOUND (-5)         /* no such key */
#define ATRIUM_E_WRONG_KIND (-6)        /* the key holds another kind of value */
#define ATRIUM_E_TOO_LARGE (-7)         /* over the host's message size limit */
#define ATRIUM_E_SHUTTING_DOWN (-8)     /* the host is stopping */
#define ATRIUM_E_BUSY (-9)              /* ABI 1.1: too many messages unanswered on the channel; later */
#define ATRIUM_E_UNAVAILABLE (-10)      /* ABI 1.3: the host cannot do this now (its log says why) */
#define ATRIUM_E_LIMIT_EXCEEDED (-11)   /* ABI 1.3: over one of the host's limits (answer status 2) */

/* ---- Status numbering (the Windows enumerations; docs/PROTOCOL.md section 4). ---- */
/* AppServiceConnectionStatus, returned by `open`. */
#define ATRIUM_OPEN_SUCCESS 0
#define ATRIUM_OPEN_APP_NOT_INSTALLED 1
#define ATRIUM_OPEN_APP_UNAVAILABLE 2
#define ATRIUM_OPEN_APP_SERVICE_UNAVAILABLE 3
#define ATRIUM_OPEN_UNKNOWN 4
#define ATRIUM_OPEN_REMOTE_SYSTEM_UNAVAILABLE 5
#define ATRIUM_OPEN_REMOTE_SYSTEM_NOT_SUPPORTED_BY_APP 6
#define ATRIUM_OPEN_NOT_AUTHORIZED 7
#define ATRIUM_OPEN_AUTHENTICATION_ERROR 8
#define ATRIUM_OPEN_NETWORK_NOT_AVAILABLE 9
#define ATRIUM_OPEN_DISABLED_BY_POLICY 10
#define ATRIUM_OPEN_WEB_SERVICE_UNAVAILABLE 11

/* AppServiceResponseStatus, passed to `respond`. */
#define ATRIUM_RESPONSE_SUCCESS 0
#define ATRIUM_RESPONSE_FAILURE 1
#define ATRIUM_RESPONSE_RESOURCE_LIMITS_EXCEEDED 2
#define ATRIUM_RESPONSE_UNKNOWN 3
#define ATRIUM_RESPONSE_REMOTE_SYSTEM_UNAVAILABLE 4
#define ATRIUM_RESPONSE_MESSAGE_SIZE_TOO_LARGE 5
#define ATRIUM_RESPONSE_APP_UNAVAILABLE 6
#define ATRIUM_RESPONSE_AUTHENTICATION_ERROR 7
#define ATRIUM_RESPONSE_NETWORK_NOT_AVAILABLE 8
#define ATRIUM_RESPONSE_DISABLED_BY_POLICY 9
#define ATRIUM_RESPONSE_WEB_SERVICE_UNAVAILABLE 10

/* AppServiceClosedStatus, passed to `closed` and `close_channel`. */
#define ATRIUM_CLOSED_COMPLETED 0
#define ATRIUM_CLOSED_CANCELED 1
#define ATRIUM_CLOSED_RESOURCE_LIMITS_EXCEEDED 2
#define ATRIUM_CLOSED_UNKNOWN 3

/* RemoteLaunchUriStatus, returned by `launch` and `launch_uri`. */
#define ATRIUM_LAUNCH_UNKNOWN 0
#define ATRIUM_LAUNCH_SUCCESS 1
#define ATRIUM_LAUNCH_APP_UNAVAILABLE 2
#define ATRIUM_LAUNCH_PROTOCOL_UNAVAILABLE 3
#define ATRIUM_LAUNCH_REMOTE_SYSTEM_UNAVAILABLE 4
#define ATRIUM_LAUNCH_VALUESET_TOO_LARGE 5
#define ATRIUM_LAUNCH_DENIED_BY_LOCAL_SYSTEM 6
#define ATRIUM_LAUNCH_DENIED_BY_REMOTE_SYSTEM 7

/* Who closed a channel, passed to `closed`. */
#define ATRIUM_CLOSED_BY_CLIENT 0  /* the client sent `close` */
#define ATRIUM_CLOSED_BY_NETWORK 1 /* the client's connection dropped */
#define ATRIUM_CLOSED_BY_HOST 2    /* the host is shutting down */
#define ATRIUM_CLOSED_BY_SERVICE 3 /* the plugin itself called close_channel */

/* Log levels for `log`. */
#define ATRIUM_LOG_TRACE 0
#define ATRIUM_LOG_DEBUG 1
#define ATRIUM_LOG_INFO 2
#define ATRIUM_LOG_NOTICE 3
#define ATRIUM_LOG_WARNING 4
#define ATRIUM_LOG_ERROR 5

/* Value kinds, returned by `message_kind`. */
#define ATRIUM_KIND_NONE 0 /* no such key */
#define ATRIUM_KIND_STRING 1
#define ATRIUM_KIND_INT 2
#define ATRIUM_KIND_DOUBLE 3
#define ATRIUM_KIND_BOOL 4
#define ATRIUM_KIND_DATE 5
#define ATRIUM_KIND_UUID 6
#define ATRIUM_KIND_BYTES 7
#define ATRIUM_KIND_ARRAY 8
#define ATRIUM_KIND_MAP 9

/* Plugin flags. */
#define ATRIUM_PLUGIN_CONCURRENT 1 /* callbacks may run concurrently (see Threads); a bit of `flags` */
/* With ATRIUM_PLUGIN_CONCURRENT: `request` never blocks and returns within microseconds, so
 * the host may call it on the network thread that received the request, sparing two thread
 * hops. Such a plugin must not wait for anything in `request` (no locks held long, no I/O,
 * no launch_uri); answering at once with `respond` is what it is for. A host that does not
 * know a flag ignores it, so setting it needs no newer ABI minor. */
#define ATRIUM_PLUGIN_NONBLOCKING 2

/* A parsed, read-only message. Made by `message_parse`, freed by `message_free`. */
typedef struct atrium_message atrium_message;
/* A message under construction. Made by `builder_new`, freed by `builder_free`. */
typedef struct atrium_builder atrium_builder;

/* What the plugin is told about a channel being opened. Borrowed during `open`. */
typedef struct atrium_channel_info {
    uint32_t struct_size;
    uint32_t is_remote;      /* 1 for a TCP client, 0 for a client on the local socket */
    uint64_t channel;        /* the host's id for the channel, unique in this host */
    const char *service;     /* the service name the client opened (one the manifest declares) */
    const char *client_id;   /* the client's `clientId` */
    const char *client_name; /* the client's `clientName`, or NULL */
} atrium_channel_info;

/* A launch handed to the plugin (a URI whose scheme its manifest declares). Borrowed during
 * `launch`. */
typedef struct atrium_launch_info {
    uint32_t struct_size;
    uint32_t is_remote;
    const char *uri;
    const uint8_t *data; /* CBOR ValueSet, or NULL when the launch carried none */
    size_t data_length;
    const char *client_id; /* who asked, or "" for a launch from a plugin */
} atrium_launch_info;

/*
 * The host's functions, handed to `create`. The table, and every pointer in it, stays valid
 * until `destroy` returns. Pass the table itself as the first argument of each function.
 */
typedef struct atrium_host_api {
    uint32_t struct_size;
    uint16_t abi_major;
    uint16_t abi_minor;
    /* The host's own; the plugin never touches it. */
    void *host_data;

    /* [any thread] Answers the request `request` (from `request`), exactly once, now or
     * later. `message`/`length`: a CBOR ValueSet, copied before the call returns; NULL and 0
     * for an empty answer. `error`: a reason for a non-success status, or NULL.
     * Returns ATRIUM_OK, ATRIUM_E_UNKNOWN_REQUEST when the request was already answered (also
     * by the host's timeout) or its client went away, ATRIUM_E_NOT_A_VALUESET or
     * ATRIUM_E_TOO_LARGE (the client then gets status 1 or 5 instead). */
    int32_t (*respond)(const struct atrium_host_api *host, uint64_t request, int32_t status,
                       const uint8_t *message, size_t length, const char *error);

    /* [any thread] Sends a message to the client of `channel`. The client's answer arrives
     * through the plugin's `response` callback with the id written to `*out_request` (which
     * may be NULL when the plugin does not need it). `message` is copied. ATRIUM_E_BUSY when the client has as
     * many of the plugin's messages on the channel unanswered as it may have requests in
     * flight (`maxInFlight`): wait for answers before sending more. */
    int32_t (*send)(const struct atrium_host_api *host, uint64_t channel, const uint8_t *message,
                    size_t length, uint64_t *out_request);

    /* [any thread] Closes `channel` from the service side; the client receives `closed` with
     * `status`. Requests on it that are still unanswered are answered with status 1, and the
     * plugin's own `closed` is called for it (ATRIUM_CLOSED_BY_SERVICE). */
    int32_t (*close_channel)(const struct atrium_host_api *host, uint64_t channel, int32_t status);

    /* [any thread] [may block] Launches `uri` through the host's scheme registry and returns a RemoteLaunchUriStatus.
     * The host cannot tell whom the plugin acts for, so it checks the launch as a remote
     * client's (the launch policy's remote rules); to launch for the client of a channel, use
     * `launch_uri_for`. May block while a handler runs (at most the host's response timeout):
     * call it from the plugin's own callbacks or threads. A serial plugin that launches its
     * own scheme from inside its own callback gets ATRIUM_LAUNCH_DENIED_BY_LOCAL_SYSTEM (it
     * would wait on itself), and so does any launch into a plugin while one of its serial
     * callbacks waits in `launch_uri`: a cycle of plugins launching each other's schemes is
     * refused at its first step back, and never waits on itself. `data` may be NULL. */
    int32_t (*launch_uri)(const struct atrium_host_api *host, const char *uri, const uint8_t *data,
                          size_t data_length);

    /* [any thread] Writes `message` (UTF-8, NUL-terminated) to the host's log at `level`,
     * tagged with the plugin's package. */
    void (*log)(const struct atrium_host_api *host, int32_t level, const char *message);

    /* ---- Reading messages. [any thread]; one message from one thread at a time. ---- */

    /* Parses CBOR bytes as a ValueSet; NULL when they are not one. The bytes need not outlive
     * the call. Free the result with `message_free`. */
    atrium_message *(*message_parse)(const struct atrium_host_api *host, const uint8_t *bytes,
                                     size_t length);
    void (*message_free)(const struct atrium_host_api *host, atrium_message *message);
    /* The number of keys. */
    size_t (*message_count)(const struct atrium_host_api *host, const atrium_message *message);
    /* The key at `index` (0 ..< count, in the order of the message), NUL-terminated, owned by
     * the message; NULL when out of range. */
    const char *(*message_key_at)(const struct atrium_host_api *host, const atrium_message *message,
                                  size_t index);
    /* The ATRIUM_KIND_ of the value under `key`, ATRIUM_KIND_NONE when absent. */
    int32_t (*message_kind)(const struct atrium_host_api *host, const atrium_message *message,
                            const char *key);
    /* Typed reads: ATRIUM_OK, ATRIUM_E_NOT_FOUND or ATRIUM_E_WRONG_KIND. Strings and bytes
     * point into the message (strings NUL-terminated) and live until `message_free`. A date is
     * seconds since 1970-01-01 UTC. A map comes back as its CBOR bytes, to parse again. */
    int32_t (*message_get_string)(const struct atrium_host_api *host, const atrium_message *message,
                                  const char *key, const char **out, size_t *out_length);
    int32_t (*message_get_int)(const struct atrium_host_api *host, const atrium_message *message,
                               const char *key, int64_t *out);
    int32_t (*message_get_double)(const struct atrium_host_api *host, const atrium_message *message,
                                  const char *key, double *out);
    int32_t (*message_get_bool)(const struct atrium_host_api *host, const atrium_message *message,
                                const char *key, int32_t *out);
    int32_t (*message_get_date)(const struct atrium_host_api *host, const atrium_message *message,
                                const char *key, double *out_seconds);
    int32_t (*message_get_uuid)(const struct atrium_host_api *host, const atrium_message *message,
                                const char *key, uint8_t out[16]);
    int32_t (*message_get_bytes)(const struct atrium_host_api *host, const atrium_message *message,
                                 const char *key, const uint8_t **out, size_t *out_length);
    int32_t (*message_get_map)(const struct atrium_host_api *host, const atrium_message *message,
                               const char *key, const uint8_t **out, size_t *out_length);

    /* ---- Building messages. [any thread]; one builder from one thread at a time. ---- */

    atrium_builder *(*builder_new)(const struct atrium_host_api *host);
    void (*builder_free)(const struct atrium_host_api *host, atrium_builder *builder);
    /* Each put sets `key` (replacing an earlier value): ATRIUM_OK, or
     * ATRIUM_E_INVALID_ARGUMENT for text that is not UTF-8 (or a NULL builder or key),
     * ATRIUM_E_NOT_A_VALUESET for `put_map` bytes that are not a ValueSet. On an array builder
     * (ABI 1.2, `builder_new_array`), a put with `key` NULL appends the value instead:
     * ATRIUM_E_WRONG_KIND for a value of another kind than the array's first element, and
     * ATRIUM_E_INVALID_ARGUMENT for a key on an array builder or NULL on a map builder. */
    int32_t (*builder_put_string)(const struct atrium_host_api *host, atrium_builder *builder,
                                  const char *key, const char *utf8, size_t length);
    int32_t (*builder_put_int)(const struct atrium_host_api *host, atrium_builder *builder,
                               const char *key, int64_t value);
    int32_t (*builder_put_double)(const struct atrium_host_api *host, atrium_builder *builder,
                                  const char *key, double value);
    int32_t (*builder_put_bool)(const struct atrium_host_api *host, atrium_builder *builder,
                                const char *key, int32_t value);
    int32_t (*builder_put_date)(const struct atrium_host_api *host, atrium_builder *builder,
                                const char *key, double seconds);
    int32_t (*builder_put_uuid)(const struct atrium_host_api *host, atrium_builder *builder,
                                const char *key, const uint8_t value[16]);
    int32_t (*builder_put_bytes)(const struct atrium_host_api *host, atrium_builder *builder,
                                 const char *key, const uint8_t *bytes, size_t length);
    int32_t (*builder_put_map)(const struct atrium_host_api *host, atrium_builder *builder,
                               const char *key, const uint8_t *cbor, size_t length);
    /* The message's CBOR bytes, owned by the builder: valid until the next put or
     * `builder_free`. Pass them to `respond` or `send`. */
    int32_t (*builder_bytes)(const struct atrium_host_api *host, atrium_builder *builder,
                             const uint8_t **out, size_t *out_length);

    /* ---- ABI 1.1: check ATRIUM_HAS_FIELD(host, atrium_host_api, field) before use. ---- */

    /* [any thread] [may block] Launches `uri` on behalf of the client of `channel` (an open channel of this plugin):
     * the host checks it as that client's own `launch` would be checked (its identity,
     * whether it is remote, the launch policy), so a plugin cannot launch for a client what
     * the client could not launch itself. Returns a RemoteLaunchUriStatus
     * (ATRIUM_LAUNCH_UNKNOWN for a channel that is not open). Blocks as `launch_uri` does. */
    int32_t (*launch_uri_for)(const struct atrium_host_api *host, uint64_t channel, const char *uri,
                              const uint8_t *data, size_t data_length);

    /* ---- ABI 1.2: arrays and nested maps, read and built without CBOR. Check
     * ATRIUM_HAS_FIELD(host, atrium_host_api, field) before use. ---- */

    /* The array under `key`, as a message of its own whose keys are the element indices "0",
     * "1", ... in order: `message_count` is its length, `message_kind(…, "0")` its elements'
     * kind (all elements of an array have one kind), and the typed reads above read each
     * element ("Keys"[2] is `message_get_string(host, array, "2", ...)`). Free it with
     * `message_free`. ATRIUM_OK, ATRIUM_E_NOT_FOUND, ATRIUM_E_WRONG_KIND, or
     * ATRIUM_E_INVALID_ARGUMENT for a NULL message, key or `out`. */
    int32_t (*message_get_array)(const struct atrium_host_api *host, const atrium_message *message,
                                 const char *key, atrium_message **out);
    /* The map under `key` (or an array's element "3" that is a map), as a message of its own
     * to read with the functions above; free it with `message_free`. ATRIUM_OK,
     * ATRIUM_E_NOT_FOUND, ATRIUM_E_WRONG_KIND, or ATRIUM_E_INVALID_ARGUMENT for a NULL
     * message, key or `out`. */
    int32_t (*message_get_message)(const struct atrium_host_api *host, const atrium_message *message,
                                   const char *key, atrium_message **out);
    /* An array under construction, freed by `builder_free`: each put with `key` NULL appends
     * an element. Its elements must all be of one kind (ATRIUM_E_WRONG_KIND for one of another
     * kind), and an array holds no arrays. Put it into a message (or a map) with
     * `builder_put_builder`; `builder_bytes` refuses it (a message is a map). */
    atrium_builder *(*builder_new_array)(const struct atrium_host_api *host);
    /* Sets `key` of `builder` to the map or the array `value` holds now (copied: `value` may
     * be changed or freed after, and may be `builder` itself). On an array builder, `key` NULL
     * appends it: a map (ATRIUM_E_WRONG_KIND for an array: arrays do not nest, or for a map
     * in an array of another kind). ATRIUM_OK, or the codes of the puts above. */
    int32_t (*builder_put_builder)(const struct atrium_host_api *host, atrium_builder *builder,
                                   const char *key, const atrium_builder *value);

    /* ---- ABI 1.3: transfers (docs/TRANSFERS.md; CONTRACT section 8). Check
     * ATRIUM_HAS_FIELD(host, atrium_host_api, field) before use. ---- */

    /* [any thread] Offers the file open as `fd` to the caller of `request` (a request the
     * plugin has not answered yet), as a download that outlives the connection: the client
     * attaches to it, resumes it after a cut, and finds its outcome later.
     *   - Descriptors: the host takes a duplicate of `fd` of its own; `fd` stays the plugin's,
     *     to close whenever it likes (even at once). The file must be a regular file open for
     *     reading. The host sends it as it is at the offer: if it is modified or truncated
     *     while it is sent, the download fails (`changed`); replace files by rename instead.
     *   - `name`: what the client may show (UTF-8, NUL-terminated), or NULL. The client never
     *     gets a path from it, nor does the host use it as one.
     *   - `out_transfer`: the transfer's id. Put it in the answer as `Transfer`
     *     (`builder_put_uuid`), then `respond` as usual.
     * Returns ATRIUM_OK; ATRIUM_E_UNKNOWN_REQUEST (not a request of this plugin that waits for
     * its answer); ATRIUM_E_INVALID_ARGUMENT (`fd` is not a readable regular file, or
     * `out_transfer` is NULL); ATRIUM_E_LIMIT_EXCEEDED (the caller, or the host, has as many
     * unfinished transfers as its limits allow: answer status 2); ATRIUM_E_UNAVAILABLE (the
     * host cannot keep transfers: its log says why). The same in a worker process
     * ("isolation": "process"), where the descriptor crosses to the host (SCM_RIGHTS). */
    int32_t (*offer_file)(const struct atrium_host_api *host, uint64_t request, int32_t fd, const char *name,
                          uint8_t out_transfer[16]);

    /* [any thread] Accepts an upload from the caller of `request` (a request the plugin has not
     * answered yet): the client sends the file, resumes it after a cut, and the host hands it
     * to the plugin's `upload` callback once every byte is in and checked.
     *   - `size`: the bytes the client said it will send, or -1 when it does not know (it ends
     *     the upload with its `last` chunk). The host reserves a known size on its disk at
     *     once, and refuses here when the disk cannot hold it.
     *   - `max_size`: the most bytes the service takes (an upload that grows past it fails), or
     *     -1 for no maximum of the service's own (the host's limits still bound it).
     *   - `name`: what the client may show (UTF-8, NUL-terminated), or NULL; handed back in
     *     `atrium_upload_info`. The host never uses it as a path.
     *   - `out_transfer`: put it in the answer as `Transfer`, then `respond`.
     * Returns ATRIUM_OK, or the codes of `offer_file` (ATRIUM_E_LIMIT_EXCEEDED also when the
     * disk cannot hold `size`, or keep the host's free-space floor). */
    int32_t (*accept_upload)(const struct atrium_host_api *host, uint64_t request, int64_t size, int64_t max_size,
                             const char *name, uint8_t out_transfer[16]);

    /* [any thread] The plugin's answer to a finished upload it was handed (`upload`), once it
     * has taken the file: `status` ATRIUM_RESPONSE_SUCCESS completes the transfer, any other
     * fails it (`serviceFailed`); `message`/`length` (a ValueSet, copied) becomes the
     * transfer's `result`, which the client collects, even much later; `error` a reason, or
     * NULL. Until this is called the host keeps the upload and hands it again after a restart
     * (at least once: a plugin that stores uploads should not mind a second delivery).
     * Returns ATRIUM_OK, ATRIUM_E_UNKNOWN_REQUEST for a delivery already answered (or not
     * one), ATRIUM_E_NOT_A_VALUESET, ATRIUM_E_TOO_LARGE. */
    int32_t (*upload_done)(const struct atrium_host_api *host, uint64_t delivery, int32_t status,
                           const uint8_t *message, size_t length, const char *error);
} atrium_host_api;

/* A finished upload handed to the plugin (ABI 1.3). Borrowed during `upload`, but for `fd`. */
typedef struct atrium_upload_info {
    uint32_t struct_size;
    /* The file, open for reading at offset 0. The plugin owns it and closes it. The host
     * deletes its own name for the file once `upload_done` is called: to keep the file without
     * copying it, link it into a folder of the plugin's on the same file system, e.g.
     *     snprintf(path, sizeof path, "/proc/self/fd/%d", info->fd);
     *     linkat(AT_FDCWD, path, folder_fd, name, AT_SYMLINK_FOLLOW);
     * and copy it (copy_file_range) where that fails (EXDEV). */
    int32_t fd;
    uint64_t delivery;        /* pass to `upload_done` */
    uint8_t transfer[16];     /* the transfer's id, as `accept_upload` gave it */
    int64_t size;             /* its size in bytes, checked */
    uint8_t digest[32];       /* its SHA-256, checked against the client's when it sent one */
    const char *name;         /* the name given to `accept_upload`, or NULL */
    const char *service;      /* the service whose request accepted it */
} atrium_upload_info;

/*
 * The plugin's descriptor, returned by atrium_plugin_entry_v1. It must stay valid for the
 * life of the process (a static constant is usual). Callbacks other than `create` may be
 * NULL; a NULL `open` accepts every channel, a NULL `request` answers status 1.
 */
typedef struct atrium_plugin {
    uint32_t struct_size; /* sizeof(atrium_plugin) as the plugin was built */
    uint16_t abi_major;   /* ATRIUM_PLUGIN_ABI_MAJOR */
    uint16_t abi_minor;   /* ATRIUM_PLUGIN_ABI_MINOR */
    const char *name;     /* for logs, e.g. "Echo" */
    const char *version;  /* for logs, e.g. "1.0.0" */
    uint64_t flags;       /* ATRIUM_PLUGIN_ */

    /* [plugin queue] Called once, after loading. `config_json` is the manifest's
     * `config` object as JSON text (NUL-terminated, "{}" when absent), borrowed. Store an
     * instance in `*instance` (passed to every other callback) and return ATRIUM_OK; any
     * other value fails the load, and the package answers `open` with status 2. */
    int32_t (*create)(const atrium_host_api *host, const char *config_json, void **instance);

    /* [plugin queue] Called once when the host shuts down, after every channel has been
     * closed and every other callback has returned; nothing is called afterwards. The
     * library is never unloaded. */
    void (*destroy)(void *instance);

    /* [plugin queue] A client opens `info->service`. Return an AppServiceConnectionStatus: ATRIUM_OPEN_SUCCESS
     * to accept, anything else to refuse (the client receives that status). */
    int32_t (*open)(void *instance, const atrium_channel_info *info);

    /* [requests] A message on an open channel. Answer it with host->respond(host, request,
     * ...), now or later, from any thread. `message` is borrowed (copy it to answer later). */
    void (*request)(void *instance, uint64_t channel, uint64_t request, const uint8_t *message,
                    size_t length);

    /* [requests] The client's answer to a message the plugin sent with `send`. A `status` other than
     * success with an empty message when the client went away or did not answer. */
    void (*response)(void *instance, uint64_t channel, uint64_t request, int32_t status,
                     const uint8_t *message, size_t length);

    /* [plugin queue] `channel` is closed (ATRIUM_CLOSED_BY_): no more requests will arrive on it, and
     * unanswered requests on it can no longer be answered. */
    void (*closed)(void *instance, uint64_t channel, int32_t status, int32_t closed_by);

    /* [plugin queue] A URI whose scheme the package declares is launched. Return a
     * RemoteLaunchUriStatus. `info` is borrowed. */
    int32_t (*launch)(void *instance, const atrium_launch_info *info);

    /* ---- ABI 1.3: transfers. A plugin built against an older header has none of these
     * (the host checks `struct_size`). ---- */

    /* [plugin queue] A finished upload (`accept_upload`): every byte in, on stable storage,
     * its size and digest checked. Take the file (`info->fd` is the plugin's), then answer
     * with `upload_done`, now or later, from any thread. Comes again after a restart of the
     * host or the plugin's worker if `upload_done` was not called: at least once. A NULL
     * `upload` fails every upload with `serviceFailed`. */
    void (*upload)(void *instance, const atrium_upload_info *info);

    /* [plugin queue] A transfer the plugin made ended without reaching it: canceled by its
     * client, expired, or removed with its caller's access. `transfer` is borrowed. May be
     * NULL. */
    void (*transfer_ended)(void *instance, const uint8_t transfer[16], const char *why);
} atrium_plugin;

/* The type of the exported entry function. */
typedef const atrium_plugin *(*atrium_plugin_entry_fn)(void);

/* The entry function itself, declared so that the compiler checks a plugin's definition. */
ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* ATRIUM_PLUGIN_H */
