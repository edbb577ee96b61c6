// What a process has allocated and not yet freed, counted exactly: an LD_PRELOAD library for
// the churn benchmarks. RSS and glibc's own figures (`mallinfo2`, `host.status`'s
// heapInUseBytes) also move with the allocator's state: chunks parked in each thread's cache
// count as in use there, and pages freed are not always given back. A leak is memory still
// allocated; this counts exactly that, with malloc_usable_size on every allocation and free.
//
//   cc -O2 -shared -fPIC -o livebytes.so Benchmarks/livebytes.c -ldl -lpthread
//   LD_PRELOAD=$PWD/livebytes.so LIVEBYTES_FILE=/tmp/counts atriumd ...
//   touch /tmp/counts.ask   # within 0.1 s /tmp/counts holds "<bytes> <blocks>" and .ask is gone
//
// The variables are taken out of the environment at start, so the processes it starts (worker
// processes, launch handlers) are not counted or slowed. Benchmarks/hosttools.py builds and
// uses it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);

static atomic_llong live_bytes;
static atomic_llong live_blocks;

// dlsym may allocate before the real functions are known: from here, never freed.
static char bootstrap[1 << 14];
static size_t bootstrap_used;
static int resolving;

static int in_bootstrap(void *pointer) {
    return (char *)pointer >= bootstrap && (char *)pointer < bootstrap + sizeof bootstrap;
}

static void *bootstrap_alloc(size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (bootstrap_used + size > sizeof bootstrap) return NULL;
    void *pointer = bootstrap + bootstrap_used;
    bootstrap_used += size;
    return pointer;
}

static void resolve(void) {
    if (real_free || resolving) return;
    resolving = 1;
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_free = dlsym(RTLD_NEXT, "free");
    resolving = 0;
}

static void counted(void *pointer) {
    if (!pointer) return;
    atomic_fetch_add_explicit(&live_bytes, (long long)malloc_usable_size(pointer), memory_order_relaxed);
    atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
}

static void uncounted(void *pointer) {
    if (!pointer) return;
    atomic_fetch_sub_explicit(&live_bytes, (long long)malloc_usable_size(pointer), memory_order_relaxed);
    atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
}

void *malloc(size_t size) {
    resolve();
    if (!real_malloc) return bootstrap_alloc(size);
    void *pointer = real_malloc(size);
    counted(pointer);
    return pointer;
}

void *calloc(size_t count, size_t size) {
    resolve();
    if (!real_calloc) return bootstrap_alloc(count * size);  // static memory is zeroed
    void *pointer = real_calloc(count, size);
    counted(pointer);
    return pointer;
}

void *realloc(void *old, size_t size) {
    resolve();
    if (in_bootstrap(old)) {
        void *pointer = malloc(size);
        if (pointer) memcpy(pointer, old, size);
        return pointer;
    }
    size_t before = old ? malloc_usable_size(old) : 0;
    void *pointer = real_realloc(old, size);
    if (pointer) {
        atomic_fetch_add_explicit(
            &live_bytes, (long long)malloc_usable_size(pointer) - (long long)before, memory_order_relaxed);
        if (!old) atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    } else if (size == 0 && old) {
        atomic_fetch_sub_explicit(&live_bytes, (long long)before, memory_order_relaxed);
        atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    }
    return pointer;
}

void free(void *pointer) {
    if (!pointer || in_bootstrap(pointer)) return;
    resolve();
    uncounted(pointer);
    real_free(pointer);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    resolve();
    int result = real_posix_memalign(out, alignment, size);
    if (result == 0) counted(*out);
    return result;
}

void *aligned_alloc(size_t alignment, size_t size) {
    resolve();
    void *pointer = real_aligned_alloc(alignment, size);
    counted(pointer);
    return pointer;
}

void *memalign(size_t alignment, size_t size) {
    void *pointer = NULL;
    return posix_memalign(&pointer, alignment, size) == 0 ? pointer : NULL;
}

static char answer_path[4096];
static char ask_path[4100];

static void *answer_when_asked(void *unused) {
    (void)unused;
    for (;;) {
        if (access(ask_path, F_OK) == 0) {
            char temporary[4200];
            snprintf(temporary, sizeof temporary, "%s.tmp", answer_path);
            FILE *file = fopen(temporary, "w");
            if (file) {
                fprintf(file, "%lld %lld\n", atomic_load(&live_bytes), atomic_load(&live_blocks));
                fclose(file);
                rename(temporary, answer_path);
            }
            unlink(ask_path);
        }
        usleep(100000);
    }
    return NULL;
}

__attribute__((constructor)) static void start(void) {
    resolve();
    const char *path = getenv("LIVEBYTES_FILE");
    if (!path || strlen(path) >= sizeof answer_path) return;
    strcpy(answer_path, path);
    snprintf(ask_path, sizeof ask_path, "%s.ask", path);
    unsetenv("LIVEBYTES_FILE");
    unsetenv("LD_PRELOAD");
    pthread_t thread;
    if (pthread_create(&thread, NULL, answer_when_asked, NULL) == 0) pthread_detach(thread);
}
