/*
 * Files: the reference C service of transfers (CONTRACT sections 6 and 8). It serves one
 * folder: `{Command: "list"}` is answered `{Names: [text]}`, the regular files in it;
 * `{Command: "get", Name}` offers that file to the caller as a download, answered
 * `{Transfer: uuid, Size: int}`, which the client then attaches to and resumes as it likes;
 * `{Command: "put", Name, Size (optional)}` accepts an upload, answered `{Transfer: uuid}`:
 * once complete, the file is in the folder under Name (or a free name made from it,
 * "photo (1).jpg") and the transfer's result is `{Name (as stored), Size, Digest (SHA-256)}`.
 *
 * Declared by manifests/files.json as package atrium.examples.files, service atrium.files.
 * Its manifest's `config` may name the folder: `{"folder": "/srv/files"}` (an absolute path,
 * or one that starts with `~/`, in the home of atriumd's user). Without it, the folder is made
 * if it is not there: $STATE_DIRECTORY/files under systemd (/var/lib/atrium/files for the
 * system's service), else $XDG_DATA_HOME/atrium/files (~/.local/share/atrium/files).
 *
 * Names come from the network: one plain file name only (no `/`, not `.` or `..`, no NUL,
 * no control character, at most 255 bytes), opened in the folder without following a link.
 * The file is offered as an open descriptor: the host never gets a path from a client.
 */
#define _GNU_SOURCE
#include "atrium_plugin.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct files {
    const atrium_host_api *host;
    int folder; /* the served folder, open for the whole life of the plugin */
    char path[PATH_MAX];
} files;


/* ---- The configuration: the string value of the top-level key "folder", if any. ---- */

/* Reads a JSON string starting at `*cursor` (just after its opening quote) into `out`.
 * Returns 0, or -1 for a string that is too long, unterminated, or has an escape this reader
 * does not take (\u). */
static int read_json_string(const char **cursor, char *out, size_t capacity) {
    const char *p = *cursor;
    size_t length = 0;
    while (*p && *p != '"') {
        char c = *p++;
        if (c == '\\') {
            switch (*p++) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            default: return -1;
            }
        }
        if (length + 1 >= capacity) return -1;
        out[length++] = c;
    }
    if (*p != '"') return -1;
    out[length] = 0;
    *cursor = p + 1;
    return 0;
}

/* Finds "folder" among the top-level keys of the config object. 1 found, 0 absent, -1 bad. */
static int config_folder(const char *json, char *out, size_t capacity) {
    int depth = 0;
    for (const char *p = json; *p; p++) {
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') depth--;
        else if (*p == '"') {
            p++;
            char key[64];
            if (read_json_string(&p, key, sizeof key) != 0) {
                /* Not a key we know (too long, or with escapes): skip the string. */
                while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
                if (!*p) return -1;
                continue;
            }
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
            if (depth == 1 && *p == ':' && strcmp(key, "folder") == 0) {
                p++;
                while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
                if (*p != '"') return -1;
                p++;
                return read_json_string(&p, out, capacity) == 0 ? 1 : -1;
            }
            p--; /* the loop's p++ goes on after the string */
        }
    }
    return 0;
}

/* Makes `path` and its parents (mode 0700), as `mkdir -p` does. */
static int make_folders(const char *path) {
    char partial[PATH_MAX];
    size_t length = strlen(path);
    if (length >= sizeof partial) return -1;
    memcpy(partial, path, length + 1);
    for (size_t i = 1; i <= length; i++) {
        if (partial[i] == '/' || partial[i] == 0) {
            char saved = partial[i];
            partial[i] = 0;
            if (mkdir(partial, 0700) != 0 && errno != EEXIST) return -1;
            partial[i] = saved;
        }
    }
    return 0;
}

static void files_destroy(void *instance);
static int32_t files_setup(files *self, const char *config_json);

static int32_t files_create(const atrium_host_api *host, const char *config_json, void **instance) {
    /* An instance of its own each time: a reload makes the new one before the old one goes. */
    files *self = calloc(1, sizeof *self);
    if (!self) return ATRIUM_E_INVALID_ARGUMENT;
    self->folder = -1;
    self->host = host;
    int32_t made = files_setup(self, config_json);
    if (made != ATRIUM_OK) {
        files_destroy(self);
        return made;
    }
    *instance = self;
    return ATRIUM_OK;
}

static int32_t files_setup(files *self, const char *config_json) {
    const atrium_host_api *host = self->host;
    char message[PATH_MAX + 128];
    if (!ATRIUM_HAS_FIELD(host, atrium_host_api, offer_file)) {
        host->log(host, ATRIUM_LOG_ERROR, "Files needs a host with ABI 1.3 (transfers)");
        return ATRIUM_E_UNAVAILABLE;
    }
    char configured[PATH_MAX];
    int found = config_folder(config_json ? config_json : "{}", configured, sizeof configured);
    const char *home = getenv("HOME");
    if (found < 0) {
        host->log(host, ATRIUM_LOG_ERROR, "config: \"folder\" is not a JSON string Files can read");
        return ATRIUM_E_INVALID_ARGUMENT;
    } else if (found == 1 && configured[0] == '/') {
        snprintf(self->path, sizeof self->path, "%s", configured);
    } else if (found == 1 && configured[0] == '~' && configured[1] == '/' && home) {
        snprintf(self->path, sizeof self->path, "%s/%s", home, configured + 2);
    } else if (found == 1) {
        snprintf(message, sizeof message,
                 "config: \"folder\" must be an absolute path or start with ~/, not \"%s\"", configured);
        host->log(host, ATRIUM_LOG_ERROR, message);
        return ATRIUM_E_INVALID_ARGUMENT;
    } else {
        const char *data = getenv("XDG_DATA_HOME");
        const char *state = getenv("STATE_DIRECTORY"); /* systemd's StateDirectory= */
        if (state && state[0] == '/') {
            size_t first = strcspn(state, ":"); /* the first of its folders */
            snprintf(self->path, sizeof self->path, "%.*s/files", (int)first, state);
        } else if (data && data[0] == '/') snprintf(self->path, sizeof self->path, "%s/atrium/files", data);
        else if (home) snprintf(self->path, sizeof self->path, "%s/.local/share/atrium/files", home);
        else {
            host->log(host, ATRIUM_LOG_ERROR, "no folder in config, and no HOME to put the default one in");
            return ATRIUM_E_INVALID_ARGUMENT;
        }
        if (make_folders(self->path) != 0) {
            snprintf(message, sizeof message, "cannot make %s: %s", self->path, strerror(errno));
            host->log(host, ATRIUM_LOG_ERROR, message);
            return ATRIUM_E_INVALID_ARGUMENT;
        }
    }
    self->folder = open(self->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (self->folder < 0) {
        snprintf(message, sizeof message, "cannot open the folder %s: %s", self->path, strerror(errno));
        host->log(host, ATRIUM_LOG_ERROR, message);
        return ATRIUM_E_INVALID_ARGUMENT;
    }
    snprintf(message, sizeof message, "Files serves %s", self->path);
    host->log(host, ATRIUM_LOG_INFO, message);
    return ATRIUM_OK;
}

static void files_destroy(void *instance) {
    files *self = instance;
    if (self->folder >= 0) close(self->folder);
    free(self);
}

/* ---- Requests ---- */

static void fail(const atrium_host_api *host, uint64_t request, int32_t status, const char *error) {
    host->respond(host, request, status, NULL, 0, error);
}

/* Whether `name` (of `length` bytes, from the message) is one plain file name. */
static const char *name_problem(const char *name, size_t length) {
    if (length == 0) return "Name is empty";
    if (length > 255) return "Name is over 255 bytes";
    if (strlen(name) != length) return "Name holds a NUL";
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return "Name is . or ..";
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/') return "Name holds a /: one plain file name only";
        if (c < 0x20 || c == 0x7f) return "Name holds a control character";
    }
    return NULL;
}

static void files_list(files *self, uint64_t request) {
    const atrium_host_api *host = self->host;
    int copy = openat(self->folder, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = copy >= 0 ? fdopendir(copy) : NULL;
    if (!dir) {
        if (copy >= 0) close(copy);
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "the folder cannot be read");
        return;
    }
    atrium_builder *names = host->builder_new_array(host);
    atrium_builder *answer = host->builder_new(host);
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        struct stat status;
        if (fstatat(dirfd(dir), entry->d_name, &status, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(status.st_mode)) continue;
        /* A name that is not UTF-8 cannot be a text value: it is left out. */
        host->builder_put_string(host, names, NULL, entry->d_name, strlen(entry->d_name));
    }
    closedir(dir);
    const uint8_t *bytes = NULL;
    size_t length = 0;
    int32_t result = host->builder_put_builder(host, answer, "Names", names);
    if (result == ATRIUM_OK) result = host->builder_bytes(host, answer, &bytes, &length);
    if (result == ATRIUM_OK) host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, bytes, length, NULL);
    else fail(host, request, ATRIUM_RESPONSE_FAILURE, "the list could not be made");
    host->builder_free(host, names);
    host->builder_free(host, answer);
}

static void files_get(files *self, uint64_t request, const atrium_message *message) {
    const atrium_host_api *host = self->host;
    const char *name = NULL;
    size_t length = 0;
    if (host->message_get_string(host, message, "Name", &name, &length) != ATRIUM_OK) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "get needs a Name (text)");
        return;
    }
    const char *problem = name_problem(name, length);
    if (problem) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, problem);
        return;
    }
    int fd = openat(self->folder, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat status;
    if (fd < 0 || fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
        if (fd >= 0) close(fd);
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "no such file in the folder");
        return;
    }
    uint8_t transfer[16];
    int32_t offered = host->offer_file(host, request, fd, name, transfer);
    /* The host has its own copy of the descriptor: this one is ours to close. */
    close(fd);
    if (offered == ATRIUM_E_LIMIT_EXCEEDED) {
        fail(host, request, ATRIUM_RESPONSE_RESOURCE_LIMITS_EXCEEDED, "too many transfers unfinished; later");
        return;
    } else if (offered != ATRIUM_OK) {
        /* ATRIUM_E_UNKNOWN_REQUEST: the client went away; the answer is dropped harmlessly. */
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "the file cannot be offered now");
        return;
    }
    atrium_builder *answer = host->builder_new(host);
    const uint8_t *bytes = NULL;
    size_t size = 0;
    host->builder_put_uuid(host, answer, "Transfer", transfer);
    host->builder_put_int(host, answer, "Size", (int64_t)status.st_size);
    if (host->builder_bytes(host, answer, &bytes, &size) == ATRIUM_OK)
        host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, bytes, size, NULL);
    else fail(host, request, ATRIUM_RESPONSE_FAILURE, "the answer could not be made");
    host->builder_free(host, answer);
}

static void files_put(files *self, uint64_t request, const atrium_message *message) {
    const atrium_host_api *host = self->host;
    const char *name = NULL;
    size_t length = 0;
    if (host->message_get_string(host, message, "Name", &name, &length) != ATRIUM_OK) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "put needs a Name (text)");
        return;
    }
    const char *problem = name_problem(name, length);
    if (problem) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, problem);
        return;
    }
    int64_t size = -1;
    int32_t kind = host->message_kind(host, message, "Size");
    if (kind != ATRIUM_KIND_NONE && (host->message_get_int(host, message, "Size", &size) != ATRIUM_OK || size < 0)) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "Size must be an int of 0 or more");
        return;
    }
    uint8_t transfer[16];
    int32_t accepted = host->accept_upload(host, request, size, -1, name, transfer);
    if (accepted == ATRIUM_E_LIMIT_EXCEEDED) {
        fail(host, request, ATRIUM_RESPONSE_RESOURCE_LIMITS_EXCEEDED,
             "the host cannot take this upload now (its limits, or its disk's free space)");
        return;
    } else if (accepted != ATRIUM_OK) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "the upload cannot be accepted now");
        return;
    }
    atrium_builder *answer = host->builder_new(host);
    const uint8_t *bytes = NULL;
    size_t answer_length = 0;
    host->builder_put_uuid(host, answer, "Transfer", transfer);
    if (host->builder_bytes(host, answer, &bytes, &answer_length) == ATRIUM_OK)
        host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, bytes, answer_length, NULL);
    else fail(host, request, ATRIUM_RESPONSE_FAILURE, "the answer could not be made");
    host->builder_free(host, answer);
}

/* `name`, or the `index`th free name made from it: "photo (2).jpg". 0, or -1 when it does not fit. */
static int variant(const char *name, int index, char *out, size_t capacity) {
    if (index == 0) return snprintf(out, capacity, "%s", name) < (int)capacity && strlen(name) <= 255 ? 0 : -1;
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) dot = name + strlen(name);
    char suffix[32];
    int suffix_length = snprintf(suffix, sizeof suffix, " (%d)", index);
    size_t base = (size_t)(dot - name), extension = strlen(dot);
    /* The base is cut so that the name stays within 255 bytes (never inside an extension). */
    if (extension + (size_t)suffix_length > 200) return -1;
    if (base + suffix_length + extension > 255) base = 255 - suffix_length - extension;
    /* Not in the middle of a UTF-8 sequence. */
    while (base > 0 && ((unsigned char)name[base] & 0xC0) == 0x80) base--;
    return snprintf(out, capacity, "%.*s%s%s", (int)base, name, suffix, dot) < (int)capacity ? 0 : -1;
}

/* Copies `from` into a new file `name` in the folder (when the upload cannot be linked). */
static int copy_into(files *self, int from, const char *name) {
    int to = openat(self->folder, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (to < 0) return -1;
    /* A plain read and write: copy_file_range fails across file systems on many kernels. */
    static __thread char buffer[1 << 16];
    off_t in = 0;
    for (;;) {
        ssize_t got = pread(from, buffer, sizeof buffer, in);
        if (got < 0 && errno == EINTR) continue;
        if (got == 0) break;
        ssize_t done = 0;
        while (got > 0 && done < got) {
            ssize_t put = write(to, buffer + done, (size_t)(got - done));
            if (put < 0 && errno == EINTR) continue;
            if (put <= 0) break;
            done += put;
        }
        if (got < 0 || done < got) {
            int saved = errno;
            close(to);
            unlinkat(self->folder, name, 0);
            errno = saved;
            return -1;
        }
        in += got;
    }
    int synced = fsync(to);
    close(to);
    return synced;
}

/* A finished upload: stored under its name, or a free name made from it, then answered with
 * what was stored. */
static void files_upload(void *instance, const atrium_upload_info *info) {
    files *self = instance;
    const atrium_host_api *host = self->host;
    char stored[512];
    char source[64];
    snprintf(source, sizeof source, "/proc/self/fd/%d", info->fd);
    const char *name = info->name ? info->name : "upload";
    int done = -1;
    for (int index = 0; index < 1000 && done != 0; index++) {
        if (variant(name, index, stored, sizeof stored) != 0) break;
        if (linkat(AT_FDCWD, source, self->folder, stored, AT_SYMLINK_FOLLOW) == 0) done = 0;
        else if (errno == EEXIST) continue;
        else if (copy_into(self, info->fd, stored) == 0) done = 0;
        else if (errno != EEXIST) break;
    }
    close(info->fd);
    if (done != 0) {
        char message[600];
        snprintf(message, sizeof message, "an upload could not be stored in %s: %s", self->path, strerror(errno));
        host->log(host, ATRIUM_LOG_ERROR, message);
        host->upload_done(host, info->delivery, ATRIUM_RESPONSE_FAILURE, NULL, 0, "the file could not be stored");
        return;
    }
    fsync(self->folder);
    atrium_builder *result = host->builder_new(host);
    const uint8_t *bytes = NULL;
    size_t length = 0;
    host->builder_put_string(host, result, "Name", stored, strlen(stored));
    host->builder_put_int(host, result, "Size", info->size);
    host->builder_put_bytes(host, result, "Digest", info->digest, sizeof info->digest);
    if (host->builder_bytes(host, result, &bytes, &length) == ATRIUM_OK)
        host->upload_done(host, info->delivery, ATRIUM_RESPONSE_SUCCESS, bytes, length, NULL);
    else host->upload_done(host, info->delivery, ATRIUM_RESPONSE_FAILURE, NULL, 0, "the result could not be made");
    host->builder_free(host, result);
}

static void files_transfer_ended(void *instance, const uint8_t transfer[16], const char *why) {
    files *self = instance;
    char message[200];
    snprintf(message, sizeof message,
             "transfer %02x%02x%02x%02x-... ended before it was finished: %s", transfer[0], transfer[1],
             transfer[2], transfer[3], why);
    self->host->log(self->host, ATRIUM_LOG_INFO, message);
}

static void files_request(void *instance, uint64_t channel, uint64_t request, const uint8_t *bytes,
                          size_t length) {
    (void)channel;
    files *self = instance;
    const atrium_host_api *host = self->host;
    atrium_message *message = host->message_parse(host, bytes, length);
    const char *command = NULL;
    size_t command_length = 0;
    if (!message || host->message_get_string(host, message, "Command", &command, &command_length) != ATRIUM_OK) {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "a request needs a Command (text): list, get or put");
    } else if (strcmp(command, "list") == 0) {
        files_list(self, request);
    } else if (strcmp(command, "get") == 0) {
        files_get(self, request, message);
    } else if (strcmp(command, "put") == 0) {
        files_put(self, request, message);
    } else {
        fail(host, request, ATRIUM_RESPONSE_FAILURE, "unknown Command: list, get or put");
    }
    if (message) host->message_free(host, message);
}

static const atrium_plugin files_plugin = {
    .struct_size = sizeof(atrium_plugin),
    .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
    .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
    .name = "Files",
    .version = "1.0.0",
    /* Nothing it keeps changes after `create`: requests may run at once. They read the
     * folder, so they are not nonblocking. */
    .flags = ATRIUM_PLUGIN_CONCURRENT,
    .create = files_create,
    .destroy = files_destroy,
    .open = NULL,
    .request = files_request,
    .response = NULL,
    .closed = NULL,
    .launch = NULL,
    .upload = files_upload,
    .transfer_ended = files_transfer_ended,
};

ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) {
    return &files_plugin;
}
