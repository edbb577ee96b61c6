#define _GNU_SOURCE
#include "atrium_system.h"
#include <sys/uio.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stddef.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <stdlib.h> /* defines __GLIBC__ on glibc */
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <limits.h>

/* Under AddressSanitizer malloc is the sanitizer's: glibc's arenas are not what allocates. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATRIUM_SANITIZED_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(ATRIUM_SANITIZED_ALLOCATOR)
#define ATRIUM_SANITIZED_ALLOCATOR 1
#endif

long long atrium_heap_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 info = mallinfo2();
    return (long long)(info.uordblks + info.hblkhd);
#else
    return -1;
#endif
}

int atrium_malloc_arena_count(void) {
#if defined(__GLIBC__) && !defined(ATRIUM_SANITIZED_ALLOCATOR)
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    if (stream == NULL) return -1;
    int written = malloc_info(0, stream);
    fclose(stream);
    int count = -1;
    if (written == 0 && text != NULL) {
        count = 0;
        for (const char *at = text; (at = strstr(at, "<heap nr=")) != NULL; at += 9) count += 1;
    }
    free(text);
    return count;
#else
    return -1;
#endif
}

int atrium_release_free_memory(void) {
#if defined(__GLIBC__)
    return malloc_trim(0);
#else
    return 0;
#endif
}

/* A whole number from 1 to INT_MAX, the first `length` bytes of `text` (all of it when
 * `length` is -1); 0 for anything else. */
static int positive_number(const char *text, long length) {
    if (text == NULL) return 0;
    char digits[16];
    size_t count = length < 0 ? strlen(text) : (size_t)length;
    if (count == 0 || count >= sizeof digits) return 0;
    memcpy(digits, text, count);
    digits[count] = '\0';
    for (size_t index = 0; index < count; index += 1) {
        if (digits[index] < '0' || digits[index] > '9') return 0;
    }
    long value = strtol(digits, NULL, 10);
    return value > 0 && value <= INT_MAX ? (int)value : 0;
}

int atrium_limit_malloc_arenas(int count) {
#if defined(ATRIUM_SANITIZED_ALLOCATOR) || !defined(__GLIBC__)
    (void)count;
    (void)positive_number;
    return 0;
#else
    /* A cap the environment sets, as glibc reads it (a value it refuses sets none). */
    int set = positive_number(getenv("MALLOC_ARENA_MAX"), -1);
    const char *tunables = getenv("GLIBC_TUNABLES");
    const char *tunable = tunables != NULL ? strstr(tunables, "glibc.malloc.arena_max=") : NULL;
    if (tunable != NULL) {
        tunable += strlen("glibc.malloc.arena_max=");
        int from_tunable = positive_number(tunable, (long)strcspn(tunable, ":"));
        if (from_tunable > 0) set = from_tunable;
    }
    if (set > 0) return set;
    return count > 0 && mallopt(M_ARENA_MAX, count) == 1 ? count : 0;
#endif
}

int atrium_malloc_thresholds_set_by(const char *trim, const char *mmap, const char *tunables) {
    return trim != NULL || mmap != NULL
        || (tunables != NULL
            && (strstr(tunables, "glibc.malloc.trim_threshold=") != NULL
                || strstr(tunables, "glibc.malloc.mmap_threshold=") != NULL));
}

int atrium_keep_freed_memory(size_t trim_bytes, size_t mmap_bytes) {
#if defined(ATRIUM_SANITIZED_ALLOCATOR) || !defined(__GLIBC__)
    (void)trim_bytes;
    (void)mmap_bytes;
    return -1;
#else
    if (atrium_malloc_thresholds_set_by(
            getenv("MALLOC_TRIM_THRESHOLD_"), getenv("MALLOC_MMAP_THRESHOLD_"), getenv("GLIBC_TUNABLES")))
        return 0;
    if (trim_bytes > INT_MAX) trim_bytes = INT_MAX;
    if (mmap_bytes > INT_MAX) mmap_bytes = INT_MAX;
    /* The mmap threshold first: glibc refuses one over half its heaps' size and then changes
     * nothing; setting either turns off its own adjusting of both. */
    if (mallopt(M_MMAP_THRESHOLD, (int)mmap_bytes) != 1) return -1;
    return mallopt(M_TRIM_THRESHOLD, (int)trim_bytes) == 1 ? 1 : -1;
#endif
}

int atrium_make_pipe(int ends[2]) {
    return pipe2(ends, O_CLOEXEC);
}

int atrium_send_descriptors(int socket, const int *descriptors, int count) {
    if (count < 0 || count > ATRIUM_MAX_PASSED_DESCRIPTORS) {
        errno = EINVAL;
        return -1;
    }
    char byte = 'F';
    struct iovec data = {.iov_base = &byte, .iov_len = 1};
    char control[CMSG_SPACE(ATRIUM_MAX_PASSED_DESCRIPTORS * sizeof(int))];
    memset(control, 0, sizeof control);
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = CMSG_SPACE((size_t)count * sizeof(int))};
    if (count == 0) {
        message.msg_control = NULL;
        message.msg_controllen = 0;
    } else {
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
        memcpy(CMSG_DATA(header), descriptors, (size_t)count * sizeof(int));
    }
    ssize_t sent;
    do {
        sent = sendmsg(socket, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return sent == 1 ? 0 : -1;
}

int atrium_receive_descriptors(int socket, int *descriptors, int max) {
    if (max < 1 || max > ATRIUM_MAX_PASSED_DESCRIPTORS) {
        errno = EINVAL;
        return -1;
    }
    char byte = 0;
    struct iovec data = {.iov_base = &byte, .iov_len = 1};
    char control[CMSG_SPACE(ATRIUM_MAX_PASSED_DESCRIPTORS * sizeof(int))];
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
    ssize_t received;
    do {
        received = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    } while (received < 0 && errno == EINTR);
    if (received != 1 || (message.msg_flags & MSG_CTRUNC) != 0) {
        if (received >= 0) errno = EPROTO;
        return -1;
    }
    int count = 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        int found = (int)((header->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *passed = (int *)CMSG_DATA(header);
        for (int index = 0; index < found; index++) {
            if (count < max) {
                descriptors[count++] = passed[index];
            } else {
                close(passed[index]);
            }
        }
    }
    return count;
}

void atrium_name_this_thread(const char *name) {
    char shortened[16];
    strncpy(shortened, name, sizeof shortened - 1);
    shortened[sizeof shortened - 1] = 0;
    pthread_setname_np(pthread_self(), shortened);
}

int atrium_spawn(const char *path, char *const argv[], char *const envp[], int input, int output, int error) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    if (posix_spawn_file_actions_init(&actions) != 0) return -ENOMEM;
    if (posix_spawnattr_init(&attributes) != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return -ENOMEM;
    }
    int result = 0;
    int sources[3] = {input, output, error};
    for (int target = 0; target < 3 && result == 0; target++) {
        result = sources[target] >= 0
            ? posix_spawn_file_actions_adddup2(&actions, sources[target], target)
            : posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDWR, 0);
    }
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &all);
    if (result == 0) result = posix_spawnattr_setsigmask(&attributes, &none);
    if (result == 0)
        result = posix_spawnattr_setflags(
            &attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    pid_t pid = 0;
    if (result == 0) result = posix_spawn(&pid, path, &actions, &attributes, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    return result == 0 ? (int)pid : -result;
}

int atrium_notify(const char *path, const char *message) {
    return atrium_send_datagram(path, message, strlen(message));
}

int atrium_send_datagram(const char *path, const void *bytes, size_t count) {
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    size_t length = strlen(path);
    if (length == 0 || length >= sizeof address.sun_path) {
        errno = EINVAL;
        return -1;
    }
    memcpy(address.sun_path, path, length);
    if (path[0] == '@') address.sun_path[0] = 0; /* an abstract socket */
    int socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (socket_ < 0) return -1;
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length);
    ssize_t sent = sendto(socket_, bytes, count, MSG_NOSIGNAL, (struct sockaddr *)&address, size);
    int saved = errno;
    close(socket_);
    errno = saved;
    return sent < 0 ? -1 : 0;
}

int atrium_listening_kind(int descriptor, char *path, int capacity) {
    int type = 0, listening = 0;
    socklen_t size = sizeof type;
    if (getsockopt(descriptor, SOL_SOCKET, SO_TYPE, &type, &size) < 0) return -1;
    size = sizeof listening;
    if (getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) < 0 || !listening) return 0;
    if (type != SOCK_STREAM) return 0;
    struct sockaddr_storage address;
    size = sizeof address;
    if (getsockname(descriptor, (struct sockaddr *)&address, &size) < 0) return 0;
    if (address.ss_family == AF_INET || address.ss_family == AF_INET6) {
        if (path && capacity > 0) {
            char text[INET6_ADDRSTRLEN] = "";
            int port;
            if (address.ss_family == AF_INET) {
                struct sockaddr_in *in4 = (struct sockaddr_in *)&address;
                inet_ntop(AF_INET, &in4->sin_addr, text, sizeof text);
                port = ntohs(in4->sin_port);
            } else {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&address;
                inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
                port = ntohs(in6->sin6_port);
            }
            snprintf(path, (size_t)capacity, "%s %d", text, port);
        }
        return 1;
    }
    if (address.ss_family != AF_UNIX) return 0;
    struct sockaddr_un *unix_address = (struct sockaddr_un *)&address;
    if (path && capacity > 0) {
        size_t length = size > offsetof(struct sockaddr_un, sun_path) ? size - offsetof(struct sockaddr_un, sun_path) : 0;
        if (length >= (size_t)capacity) length = (size_t)capacity - 1;
        memcpy(path, unix_address->sun_path, length);
        path[length] = 0;
        if (length > 0 && path[0] == 0) path[0] = '@';
    }
    return 2;
}

int atrium_send_tagged_descriptor(int socket, int descriptor, unsigned long long tag, int wait) {
    struct iovec data = {.iov_base = &tag, .iov_len = sizeof tag};
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
    ssize_t sent;
    do {
        sent = sendmsg(socket, &message, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    } while (sent < 0 && errno == EINTR);
    return sent == (ssize_t)sizeof tag ? 0 : -1;
}

int atrium_receive_tagged_descriptor(int socket, int *descriptor, unsigned long long *tag, int wait) {
    unsigned long long value = 0;
    struct iovec data = {.iov_base = &value, .iov_len = sizeof value};
    char control[CMSG_SPACE(4 * sizeof(int))];
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
    ssize_t received;
    do {
        received = recvmsg(socket, &message, MSG_CMSG_CLOEXEC | (wait ? 0 : MSG_DONTWAIT));
    } while (received < 0 && errno == EINTR);
    if (received < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    if (received == 0) {
        errno = 0;
        return -1;
    }
    int found = -1;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t index = 0; index < count; index++) {
            int passed;
            memcpy(&passed, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
            /* One descriptor a message: any more are closed, never leaked. */
            if (found < 0) found = passed;
            else close(passed);
        }
    }
    if (received != (ssize_t)sizeof value || (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        if (found >= 0) close(found);
        errno = EBADMSG;
        return -1;
    }
    *descriptor = found;
    *tag = value;
    return 1;
}

long atrium_pread_cached(int descriptor, void *buffer, unsigned long count, long long offset) {
#ifdef RWF_NOWAIT
    struct iovec vector = {.iov_base = buffer, .iov_len = count};
    ssize_t got;
    do {
        got = preadv2(descriptor, &vector, 1, (off_t)offset, RWF_NOWAIT);
    } while (got < 0 && errno == EINTR);
    return (long)got;
#else
    (void)descriptor; (void)buffer; (void)count; (void)offset;
    errno = EOPNOTSUPP;
    return -1;
#endif
}
