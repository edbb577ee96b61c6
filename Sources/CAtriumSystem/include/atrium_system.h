#ifndef ATRIUM_SYSTEM_H
#define ATRIUM_SYSTEM_H

#include <stddef.h>

/* System calls the host needs that Swift's Glibc module does not offer. */

/* Gives freed heap memory back to the system (glibc's malloc_trim(0)); returns 1 when some
 * was released, 0 otherwise (and always 0 where there is no malloc_trim). */
int atrium_release_free_memory(void);

/* Caps glibc's malloc arenas (M_ARENA_MAX) at `count`, unless the environment sets a cap of
 * its own (MALLOC_ARENA_MAX, or glibc.malloc.arena_max in GLIBC_TUNABLES; a value glibc
 * refuses, such as 0, sets none). Arenas made before the call stay: call it first thing in
 * main, before a second thread allocates. Returns the cap in force, or 0 when it is glibc's own
 * (8 per core), there is no glibc, or malloc is AddressSanitizer's. */
int atrium_limit_malloc_arenas(int count);

/* Lets glibc's malloc keep up to `trim_bytes` of freed memory at the top of each of its heaps
 * for reuse (M_TRIM_THRESHOLD; glibc's default gives back all over 128 KiB at once), and serve
 * blocks of up to `mmap_bytes` from them (M_MMAP_THRESHOLD) rather than mapping each afresh,
 * unless the environment sets either (atrium_malloc_thresholds_set_by). Values over INT_MAX
 * count as INT_MAX. Returns 1 when set, 0 when the environment's settings stand, -1 when glibc
 * refused (an mmap threshold over half its heaps' size; nothing is changed then), where there is
 * no glibc, or where malloc is AddressSanitizer's. */
int atrium_keep_freed_memory(size_t trim_bytes, size_t mmap_bytes);

/* Whether the environment sets glibc's trim or mmap threshold: `trim` and `mmap` are the values
 * of MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_ (NULL when unset), `tunables` that of
 * GLIBC_TUNABLES (glibc.malloc.trim_threshold, glibc.malloc.mmap_threshold). */
int atrium_malloc_thresholds_set_by(const char *trim, const char *mmap, const char *tunables);

/* Makes a pipe whose two ends are close-on-exec from the start (pipe2 with O_CLOEXEC, which
 * Swift's Glibc module does not offer): ends[0] reads, ends[1] writes. Returns 0, or -1 with
 * errno set. */
int atrium_make_pipe(int ends[2]);

/* The most descriptors one atrium_send_descriptors message passes: two for each of a worker's
 * links (at most 15), and its descriptor socket. */
#define ATRIUM_MAX_PASSED_DESCRIPTORS 32

/* Passes `count` open descriptors (0 to ATRIUM_MAX_PASSED_DESCRIPTORS) over the Unix socket
 * `socket` (SCM_RIGHTS), with
 * one byte of data. Returns 0, or -1 with errno set. */
int atrium_send_descriptors(int socket, const int *descriptors, int count);

/* Receives the descriptors of one atrium_send_descriptors message from `socket` (blocking),
 * at most `max` (at most ATRIUM_MAX_PASSED_DESCRIPTORS), made close-on-exec. Returns how many,
 * or -1 with errno set. */
int atrium_receive_descriptors(int socket, int *descriptors, int max);

/* Passes one open descriptor over the SOCK_SEQPACKET socket `socket` (SCM_RIGHTS), tagged
 * with `tag` (8 bytes of data), without waiting when `wait` is 0. Returns 0, or -1 with errno
 * set (EAGAIN: the socket is full and `wait` is 0). */
int atrium_send_tagged_descriptor(int socket, int descriptor, unsigned long long tag, int wait);

/* Receives one atrium_send_tagged_descriptor message from `socket`, without waiting when
 * `wait` is 0: its descriptor (made close-on-exec; -1 when the message carried none) and tag.
 * Returns 1, 0 when none is waiting (and `wait` is 0), or -1 with errno set (0: the other end
 * closed; EBADMSG: a message that is not one). */
int atrium_receive_tagged_descriptor(int socket, int *descriptor, unsigned long long *tag, int wait);

/* Reads up to `count` bytes of `descriptor` at `offset` only from what the page cache holds
 * (preadv2 with RWF_NOWAIT): never waits for the disk. Returns the bytes read (fewer when only
 * part is cached), or -1 with errno set (EAGAIN: nothing of it is cached; EOPNOTSUPP or ENOSYS:
 * the kernel or the file system cannot say). */
long atrium_pread_cached(int descriptor, void *buffer, unsigned long count, long long offset);

/* Starts the program at `path` with `argv` and `envp` (each NULL-terminated) in a session of
 * its own (so it leads its own process group), with standard input, output and error from
 * `input`, `output` and `error` (-1: /dev/null), every other descriptor closed, every signal
 * at its default and none blocked. Returns the child's pid, or -errno. */
int atrium_spawn(const char *path, char *const argv[], char *const envp[], int input, int output, int error);

/* The bytes the heap holds for the program now, in every arena, mmapped blocks included
 * (glibc's mallinfo2: uordblks + hblkhd); -1 where there is no mallinfo2. */
long long atrium_heap_in_use(void);

/* How many malloc arenas the process has made (glibc's malloc_info: its <heap> elements);
 * -1 where it cannot be told (no glibc, or malloc is AddressSanitizer's). */
int atrium_malloc_arena_count(void);

/* Names the calling thread (at most 15 bytes are kept), as ps and /proc show it. */
void atrium_name_this_thread(const char *name);

/* Sends `message` (systemd's notify protocol: "READY=1", "STOPPING=1", "STATUS=...") as one
 * datagram to the Unix socket `path` (NOTIFY_SOCKET; a leading '@' is an abstract socket).
 * Returns 0, or -1 with errno set. */
int atrium_notify(const char *path, const char *message);

/* Sends `count` bytes as one datagram to the Unix socket `path` (as atrium_notify; for the
 * journal's native protocol). Returns 0, or -1 with errno set. */
int atrium_send_datagram(const char *path, const void *bytes, size_t count);

/* What listening socket `descriptor` is (one handed over by socket activation): 1 a TCP
 * socket (IPv4 or IPv6), 2 a Unix stream socket, 0 anything else or not listening, -1 not a
 * socket. Its address is written to `path` (of `capacity` bytes): "ADDRESS PORT" for a TCP
 * socket, the path for a Unix socket ('@' first for an abstract one). */
int atrium_listening_kind(int descriptor, char *path, int capacity);

#endif
