/*
 * A C service that reads every kind of value through the host's accessors and answers with
 * what it found, built with the host's message builder: the tests check the C ABI's
 * reading and building functions through it.
 *
 * Request keys it reads: Int, Double, Bool, Date, Text, Bytes, Uuid, Map.
 * Answer: IntPlusOne, DoubleTimesTwo, NotBool, DateNextDay, Text, TextLength, Bytes, Uuid,
 * Map, Count, FirstKey, KindOfText, Missing, WrongKind, BadUtf8, BadMap.
 *
 * A request with "Numbers" (an array of ints) and "Items" (an array of maps with a "Name")
 * exercises ABI 1.2's arrays and nested maps instead, and answers NumbersSum, NumbersCount,
 * NumbersKind, Names (each item's Name), Keys (the request's keys), Nested
 * ({"List": [{"A": 1}, {"A": 2}], "Empty": []}), and the codes of misuses: MixedAppend,
 * KeyOnArray, NoKeyOnMap, ArrayBytes, LeadingZero, OutOfRange, NotAnArray, NestedArray, and
 * of NULL arguments: NullOut, NullBuilder, NullNested.
 *
 * It also misbehaves on request, as a careless C plugin might: it is serial (no flags), and
 *   - a request {"LaunchOwn": uri} launches uri from inside the request callback with
 *     launch_uri ({"LaunchFor": uri}: with launch_uri_for, for the channel's client) and
 *     answers {"LaunchStatus": n};
 *   - opening a service "status.<n>" answers open with n, negative ones included; opening
 *     "sleep.<ms>" sleeps ms milliseconds, then accepts;
 *   - a launch of "atrium-ctest:status/<n>" answers n, negative ones included;
 *   - a launch of "<scheme>:relay/<uri>" launches <uri> from inside the launch callback and
 *     answers what that launch answered;
 *   - created with a config that holds "hangInCreate", it never returns from create (a
 *     plugin stuck while loading);
 *   - a request {"SleepMs": n} blocks its (only) thread for n milliseconds, then answers;
 *   - a request {"Crash": how} never answers: "segv" dereferences NULL, "abort" aborts,
 *     "exit" exits with status 3, "spin" loops for ever, "leak" allocates and touches memory
 *     until none is left, then aborts, "garble" (in a worker process) writes to each of the
 *     worker's pipes to the host the start of a frame longer than any host takes, then
 *     waits for ever;
 *   - a request {"Uid": anything} answers {"Uid": the process's user id};
 *   - a request {"Fork": anything} starts a child process that waits for ever, and answers
 *     {"Child": its pid};
 *   - a request {"CloseChannel": n} closes its own channel with status n from inside the
 *     request callback, and answers {"Closed": what close_channel returned}; a request
 *     {"AfterClosed": anything} answers {"AfterClosed": how many requests arrived on a
 *     channel after its `closed`} (which the host must never let happen);
 *   - a request {"Forge": n}, in a worker process, writes n frames the worker must never send
 *     (an unknown type, and an answer to request 0) straight to one of the worker's pipes
 *     to the host (the first pipe's write end above standard error), as a hostile plugin
 *     could, then answers {"Forged": how many it wrote}, or {"Forged": -1} when it found no
 *     such pipe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "atrium_plugin.h"

/* Whether this process is a worker process of atriumd's (started `atriumd --worker ...`). */
static int in_worker(void) {
    static int known = -1;
    if (known >= 0) return known;
    char arguments[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t length = fd < 0 ? -1 : read(fd, arguments, sizeof arguments - 1);
    if (fd >= 0) close(fd);
    known = 0;
    if (length > 0) arguments[length] = 0;
    for (ssize_t at = 0; at < length; at += (ssize_t)strlen(arguments + at) + 1) {
        if (strcmp(arguments + at, "--worker") == 0) known = 1;
    }
    return known;
}

/* Whether descriptor fd is, in a worker process, one of its pipes to the host: the write end
 * of a pipe above standard error (standard output and error are pipes to the host's log). In
 * process, none passes: the host's own pipes are not the plugin's to write. */
static int is_host_pipe(int fd) {
    struct stat status;
    if (fd <= 2 || !in_worker() || fstat(fd, &status) != 0 || !S_ISFIFO(status.st_mode)) return 0;
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & O_ACCMODE) == O_WRONLY;
}

/* Writes all of bytes to fd, whatever the pipe takes at a time; 0 when it cannot. */
static int write_all(int fd, const uint8_t *bytes, size_t count) {
    size_t sent = 0;
    while (sent < count) {
        ssize_t wrote = write(fd, bytes + sent, count - sent);
        if (wrote > 0) sent += (size_t)wrote;
        else if (wrote < 0 && errno != EAGAIN && errno != EINTR) return 0;
        else usleep(100);
    }
    return 1;
}

static const atrium_host_api *host_api;

/* The channels `closed` was called for (the latest 256), and the requests that arrived on
 * one of them afterwards. The plugin is serial: its callbacks never overlap. */
static uint64_t closed_channels[256];
static unsigned closed_count;
static int64_t after_closed;

static void ctest_closed(void *instance, uint64_t channel, int32_t status, int32_t closed_by) {
    (void)instance;
    (void)status;
    (void)closed_by;
    closed_channels[closed_count++ % 256] = channel;
}

static int was_closed(uint64_t channel) {
    unsigned n = closed_count < 256 ? closed_count : 256;
    for (unsigned i = 0; i < n; i++) {
        if (closed_channels[i] == channel) return 1;
    }
    return 0;
}

static int32_t ctest_create(const atrium_host_api *host, const char *config_json, void **instance) {
    if (config_json && strstr(config_json, "hangInCreate")) {
        for (;;) pause();
    }
    host_api = host;
    *instance = (void *)host;
    return ATRIUM_OK;
}

static int32_t ctest_open(void *instance, const atrium_channel_info *info) {
    (void)instance;
    if (strncmp(info->service, "status.", 7) == 0) return (int32_t)atol(info->service + 7);
    if (strncmp(info->service, "sleep.", 6) == 0) usleep((useconds_t)(atol(info->service + 6) * 1000));
    return ATRIUM_OPEN_SUCCESS;
}

static int32_t ctest_launch(void *instance, const atrium_launch_info *info) {
    const atrium_host_api *host = (const atrium_host_api *)instance;
    const char *relay = strstr(info->uri, ":relay/");
    if (relay != NULL) return host->launch_uri(host, relay + strlen(":relay/"), NULL, 0);
    const char *prefix = "atrium-ctest:status/";
    if (strncmp(info->uri, prefix, strlen(prefix)) == 0) return (int32_t)atol(info->uri + strlen(prefix));
    return ATRIUM_LAUNCH_SUCCESS;
}

/* Answers `request` with what `out` holds, then frees both messages. */
static void finish(const atrium_host_api *host, uint64_t request, atrium_builder *out, atrium_message *in) {
    const uint8_t *answer = NULL;
    size_t answer_length = 0;
    host->builder_bytes(host, out, &answer, &answer_length);
    host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, answer, answer_length, NULL);
    host->builder_free(host, out);
    host->message_free(host, in);
}

static void ctest_request(void *instance, uint64_t channel, uint64_t request, const uint8_t *message,
                          size_t length) {
    const atrium_host_api *host = (const atrium_host_api *)instance;
    atrium_message *in = host->message_parse(host, message, length);
    if (in == NULL) {
        host->respond(host, request, ATRIUM_RESPONSE_FAILURE, NULL, 0, "could not parse");
        return;
    }
    atrium_builder *out = host->builder_new(host);

    if (was_closed(channel)) after_closed++;
    int64_t close_status = 0;
    if (host->message_get_int(host, in, "CloseChannel", &close_status) == ATRIUM_OK) {
        host->builder_put_int(host, out, "Closed", host->close_channel(host, channel, (int32_t)close_status));
        finish(host, request, out, in);
        return;
    }
    if (host->message_kind(host, in, "AfterClosed") != ATRIUM_KIND_NONE) {
        host->builder_put_int(host, out, "AfterClosed", after_closed);
        finish(host, request, out, in);
        return;
    }

    int64_t sleep_ms = 0;
    if (host->message_get_int(host, in, "SleepMs", &sleep_ms) == ATRIUM_OK) {
        usleep((useconds_t)(sleep_ms * 1000));
        host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, NULL, 0, NULL);
        host->builder_free(host, out);
        host->message_free(host, in);
        return;
    }

    if (host->message_kind(host, in, "Fork") != ATRIUM_KIND_NONE) {
        pid_t child = fork();
        if (child == 0) {
            for (;;) pause();
        }
        host->builder_put_int(host, out, "Child", (int64_t)child);
        finish(host, request, out, in);
        return;
    }

    if (host->message_kind(host, in, "Uid") != ATRIUM_KIND_NONE) {
        host->builder_put_int(host, out, "Uid", (int64_t)getuid());
        finish(host, request, out, in);
        return;
    }

    int64_t forge = 0;
    if (host->message_get_int(host, in, "Forge", &forge) == ATRIUM_OK) {
        /* {"type": "x"} and {"type": "respond", "id": 0, "status": 0}, each with its length. */
        static const uint8_t frames[] = {
            0, 0, 0, 8, 0xa1, 0x64, 't', 'y', 'p', 'e', 0x61, 'x',
            0, 0, 0, 26, 0xa3, 0x64, 't', 'y', 'p', 'e', 0x67, 'r', 'e', 's', 'p', 'o', 'n', 'd',
            0x62, 'i', 'd', 0x00, 0x66, 's', 't', 'a', 't', 'u', 's', 0x00,
        };
        int pipe_fd = -1;
        for (int fd = 0; fd < 1024 && pipe_fd < 0; fd++) {
            if (is_host_pipe(fd)) pipe_fd = fd;
        }
        int64_t forged = pipe_fd < 0 ? -1 : 0;
        for (int64_t n = 0; n < forge && pipe_fd >= 0; n++) {
            if (!write_all(pipe_fd, frames, sizeof frames)) break;
            forged++;
        }
        host->builder_put_int(host, out, "Forged", forged);
        finish(host, request, out, in);
        return;
    }

    /* {"Accept": PATH}: accepts an upload of unknown size, which `ctest_upload` stores at PATH;
     * with "CrashOnce": true, the first delivery of it kills the plugin instead. */
    const char *accept_path = NULL;
    size_t accept_length = 0;
    if (host->message_get_string(host, in, "Accept", &accept_path, &accept_length) == ATRIUM_OK &&
        ATRIUM_HAS_FIELD(host, atrium_host_api, accept_upload)) {
        char name[1024];
        int32_t crash_once = 0;
        host->message_get_bool(host, in, "CrashOnce", &crash_once);
        snprintf(name, sizeof name, "%s%s", crash_once ? "!" : "", accept_path);
        uint8_t transfer[16];
        int32_t accepted = host->accept_upload(host, request, -1, -1, name, transfer);
        if (accepted != ATRIUM_OK) {
            host->builder_put_int(host, out, "Refused", accepted);
        } else {
            host->builder_put_uuid(host, out, "Transfer", transfer);
        }
        finish(host, request, out, in);
        return;
    }

    const char *crash = NULL;
    size_t crash_length = 0;
    if (host->message_get_string(host, in, "Crash", &crash, &crash_length) == ATRIUM_OK) {
        if (strcmp(crash, "segv") == 0) {
            *(volatile int *)NULL = 1;
        } else if (strcmp(crash, "abort") == 0) {
            abort();
        } else if (strcmp(crash, "exit") == 0) {
            _exit(3);
        } else if (strcmp(crash, "spin") == 0) {
            for (volatile unsigned long n = 0;; n++) {}
        } else if (strcmp(crash, "garble") == 0) {
            static const uint8_t garbled[] = {0xff, 0xff, 0xff, 0xff, 0xa1};
            int garbled_any = 0;
            for (int fd = 0; fd < 1024; fd++) {
                if (is_host_pipe(fd) && write_all(fd, garbled, sizeof garbled)) garbled_any = 1;
            }
            if (garbled_any) {
                for (;;) pause();
            }
        } else if (strcmp(crash, "leak") == 0) {
            for (;;) {
                char *block = malloc(1 << 20);
                if (block == NULL) abort();
                memset(block, 1, 1 << 20);
            }
        }
        host->respond(host, request, ATRIUM_RESPONSE_FAILURE, NULL, 0, "unknown Crash");
        host->builder_free(host, out);
        host->message_free(host, in);
        return;
    }

    if (host->message_kind(host, in, "Numbers") == ATRIUM_KIND_ARRAY &&
        ATRIUM_HAS_FIELD(host, atrium_host_api, builder_put_builder)) {
        atrium_message *numbers = NULL;
        host->message_get_array(host, in, "Numbers", &numbers);
        int64_t sum = 0;
        size_t count = host->message_count(host, numbers);
        char position[24];
        for (size_t n = 0; n < count; n++) {
            int64_t value = 0;
            snprintf(position, sizeof position, "%zu", n);
            /* Wrapping, not undefined, on a client's INT64_MAX + 1. */
            if (host->message_get_int(host, numbers, position, &value) == ATRIUM_OK) {
                sum = (int64_t)((uint64_t)sum + (uint64_t)value);
            }
        }
        host->builder_put_int(host, out, "NumbersSum", sum);
        host->builder_put_int(host, out, "NumbersCount", (int64_t)count);
        host->builder_put_int(host, out, "NumbersKind", host->message_kind(host, numbers, "0"));
        int64_t unused = 0;
        host->builder_put_int(host, out, "LeadingZero", host->message_get_int(host, numbers, "00", &unused));
        host->builder_put_int(host, out, "OutOfRange", host->message_get_int(host, numbers, "99", &unused));
        host->message_free(host, numbers);

        /* Each item's Name, through the nested maps, into an array of strings. */
        atrium_builder *names = host->builder_new_array(host);
        atrium_message *items = NULL;
        if (host->message_get_array(host, in, "Items", &items) == ATRIUM_OK) {
            for (size_t n = 0; n < host->message_count(host, items); n++) {
                atrium_message *item = NULL;
                snprintf(position, sizeof position, "%zu", n);
                if (host->message_get_message(host, items, position, &item) != ATRIUM_OK) continue;
                const char *name = NULL;
                size_t name_length = 0;
                if (host->message_get_string(host, item, "Name", &name, &name_length) == ATRIUM_OK) {
                    host->builder_put_string(host, names, NULL, name, name_length);
                }
                host->message_free(host, item);
            }
            host->message_free(host, items);
        }
        host->builder_put_builder(host, out, "Names", names);
        host->builder_free(host, names);

        atrium_builder *keys = host->builder_new_array(host);
        for (size_t n = 0; n < host->message_count(host, in); n++) {
            const char *key = host->message_key_at(host, in, n);
            host->builder_put_string(host, keys, NULL, key, strlen(key));
        }
        host->builder_put_int(host, out, "MixedAppend", host->builder_put_int(host, keys, NULL, 7));
        host->builder_put_int(host, out, "KeyOnArray", host->builder_put_int(host, keys, "k", 7));
        host->builder_put_builder(host, out, "Keys", keys);
        const uint8_t *array_bytes = NULL;
        size_t array_length = 0;
        host->builder_put_int(host, out, "ArrayBytes", host->builder_bytes(host, keys, &array_bytes, &array_length));
        host->builder_free(host, keys);

        /* {"List": [{"A": 1}, {"A": 2}], "Empty": []}, built from nested builders. */
        atrium_builder *nested = host->builder_new(host);
        atrium_builder *list = host->builder_new_array(host);
        for (int64_t n = 1; n <= 2; n++) {
            atrium_builder *element = host->builder_new(host);
            host->builder_put_int(host, element, "A", n);
            host->builder_put_builder(host, list, NULL, element);
            host->builder_free(host, element);
        }
        atrium_builder *empty = host->builder_new_array(host);
        host->builder_put_int(host, out, "NestedArray", host->builder_put_builder(host, list, NULL, empty));
        host->builder_put_builder(host, nested, "List", list);
        host->builder_put_builder(host, nested, "Empty", empty);
        host->builder_free(host, empty);
        host->builder_free(host, list);
        host->builder_put_int(host, out, "NoKeyOnMap", host->builder_put_int(host, nested, NULL, 1));
        host->builder_put_builder(host, out, "Nested", nested);
        host->builder_free(host, nested);
        atrium_message *not_array = NULL;
        host->builder_put_int(host, out, "NotAnArray", host->message_get_array(host, in, "Items2", &not_array));
        host->builder_put_int(host, out, "NullOut", host->message_get_array(host, in, "Numbers", NULL));
        host->builder_put_int(host, out, "NullBuilder", host->builder_put_builder(host, out, "X", NULL));
        host->builder_put_int(host, out, "NullNested", host->builder_put_builder(host, NULL, "X", out));
        finish(host, request, out, in);
        return;
    }

    const char *own = NULL;
    size_t own_length = 0;
    int for_client = host->message_get_string(host, in, "LaunchFor", &own, &own_length) == ATRIUM_OK;
    if (for_client || host->message_get_string(host, in, "LaunchOwn", &own, &own_length) == ATRIUM_OK) {
        int32_t status = for_client ? host->launch_uri_for(host, channel, own, NULL, 0)
                                    : host->launch_uri(host, own, NULL, 0);
        host->builder_put_int(host, out, "LaunchStatus", status);
        finish(host, request, out, in);
        return;
    }

    int64_t i = 0;
    if (host->message_get_int(host, in, "Int", &i) == ATRIUM_OK) host->builder_put_int(host, out, "IntPlusOne", i + 1);
    double d = 0;
    if (host->message_get_double(host, in, "Double", &d) == ATRIUM_OK) host->builder_put_double(host, out, "DoubleTimesTwo", d * 2);
    int32_t b = 0;
    if (host->message_get_bool(host, in, "Bool", &b) == ATRIUM_OK) host->builder_put_bool(host, out, "NotBool", !b);
    double seconds = 0;
    if (host->message_get_date(host, in, "Date", &seconds) == ATRIUM_OK) host->builder_put_date(host, out, "DateNextDay", seconds + 86400);
    const char *text = NULL;
    size_t text_length = 0;
    if (host->message_get_string(host, in, "Text", &text, &text_length) == ATRIUM_OK) {
        host->builder_put_string(host, out, "Text", text, text_length);
        host->builder_put_int(host, out, "TextLength", (int64_t)strlen(text));
    }
    const uint8_t *bytes = NULL;
    size_t bytes_length = 0;
    if (host->message_get_bytes(host, in, "Bytes", &bytes, &bytes_length) == ATRIUM_OK) host->builder_put_bytes(host, out, "Bytes", bytes, bytes_length);
    uint8_t uuid[16];
    if (host->message_get_uuid(host, in, "Uuid", uuid) == ATRIUM_OK) host->builder_put_uuid(host, out, "Uuid", uuid);
    const uint8_t *map = NULL;
    size_t map_length = 0;
    if (host->message_get_map(host, in, "Map", &map, &map_length) == ATRIUM_OK) host->builder_put_map(host, out, "Map", map, map_length);

    host->builder_put_int(host, out, "Count", (int64_t)host->message_count(host, in));
    const char *first = host->message_key_at(host, in, 0);
    if (first != NULL) host->builder_put_string(host, out, "FirstKey", first, strlen(first));
    host->builder_put_int(host, out, "KindOfText", host->message_kind(host, in, "Text"));
    host->builder_put_int(host, out, "Missing", host->message_get_int(host, in, "NoSuchKey", &i));
    host->builder_put_int(host, out, "WrongKind", host->message_get_int(host, in, "Text", &i));
    host->builder_put_int(host, out, "BadUtf8", host->builder_put_string(host, out, "Never", "\xc3\x28", 2));
    static const uint8_t not_a_map[] = {0xa1, 0x61, 0x78, 0xf6}; /* {"x": null} */
    host->builder_put_int(host, out, "BadMap", host->builder_put_map(host, out, "Never2", not_a_map, sizeof not_a_map));

    finish(host, request, out, in);
}

/* A finished upload: copied to the path its name holds. A name that starts with '!' kills the
 * plugin the first time it arrives (a marker file next to the path says it has), so that the
 * host must hand it over again to the restarted worker. */
static void ctest_upload(void *instance, const atrium_upload_info *info) {
    const atrium_host_api *host = (const atrium_host_api *)instance;
    const char *path = info->name ? info->name : "";
    if (path[0] == '!') {
        path++;
        char marker[1100];
        snprintf(marker, sizeof marker, "%s.crashed", path);
        int made = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (made >= 0) {
            close(made);
            abort();
        }
    }
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    static char buffer[1 << 16];
    off_t at = 0;
    ssize_t got;
    int ok = out >= 0;
    while (ok && (got = pread(info->fd, buffer, sizeof buffer, at)) > 0) {
        ok = write_all(out, (const uint8_t *)buffer, (size_t)got);
        at += got;
    }
    if (out >= 0) close(out);
    close(info->fd);
    atrium_builder *result = host->builder_new(host);
    host->builder_put_int(host, result, "Size", info->size);
    host->builder_put_int(host, result, "Pid", (int64_t)getpid());
    const uint8_t *bytes = NULL;
    size_t length = 0;
    host->builder_bytes(host, result, &bytes, &length);
    host->upload_done(host, info->delivery, ok ? ATRIUM_RESPONSE_SUCCESS : ATRIUM_RESPONSE_FAILURE, bytes, length,
                      ok ? NULL : "could not store");
    host->builder_free(host, result);
}

static const atrium_plugin ctest_plugin = {
    .struct_size = sizeof(atrium_plugin),
    .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
    .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
    .name = "CTestService",
    .version = "1.0.0",
    .flags = 0,
    .create = ctest_create,
    .open = ctest_open,
    .request = ctest_request,
    .closed = ctest_closed,
    .launch = ctest_launch,
    .upload = ctest_upload,
};

ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &ctest_plugin; }
