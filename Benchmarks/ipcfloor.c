/* The floor under what a worker process adds to a request: two bare processes passing 100
 * bytes back and forth, the answering one waiting as a worker does. Prints the median of 5 runs
 * of N round trips, in microseconds a round trip. Benchmarks/workers.py builds and runs it (on
 * core 0 with --pinned) beside its measurements. The way the bytes travel:
 *
 *   pipes       a pipe each way, the answering side blocked in read: a worker's links now;
 *   socketpair  one Unix stream socket pair, the answering side waiting in poll and then
 *               reading: a worker's links before they were pipes;
 *   ring        shared memory, the answering side asleep on a futex that the asker wakes, the
 *               asker woken by an eventfd: what a ring of shared memory between the host and a
 *               worker would cost at least (the host's event loop can wait on a descriptor,
 *               not on a word of memory).
 *
 * And the same with a third process, as a request to a worker has one: an asker sends 100
 * bytes over TCP on loopback to a forwarder waiting in epoll, as a client does to the host,
 *
 *   direct      and the forwarder answers itself: a service in the host's process;
 *   relay       or passes them to an answerer over a pipe and the answer back over another
 *               (the answerer blocked in read): a service in a worker process.
 *
 * relay minus direct is what the hop to a worker costs at least. With all three on one core it
 * is more than a pipes round trip: each wake-up preempts the process that made it, which then
 * has to be run once more only to wait again.
 *
 *     cc -O2 -o ipcfloor Benchmarks/ipcfloor.c && ./ipcfloor 100000 pipes
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode { PIPES, SOCKETPAIR, RING, DIRECT, RELAY };

/* The ring's shared page: the asker's count of messages sent, the answerer's count answered,
 * whether the answerer sleeps, and a message each way. */
struct shared {
    uint32_t sent;
    uint32_t answered;
    uint32_t sleeping;
    uint32_t stop;
    char question[128];
    char answer[128];
};

static void answer_ring(struct shared *shared, int wake) {
    uint32_t seen = 0;
    char buffer[128];
    for (;;) {
        /* Says it sleeps, then looks once more (the asker publishes, then looks whether it
         * sleeps): one of the two sees the other. */
        while (__atomic_load_n(&shared->sent, __ATOMIC_SEQ_CST) == seen) {
            __atomic_store_n(&shared->sleeping, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&shared->sent, __ATOMIC_SEQ_CST) == seen)
                syscall(SYS_futex, &shared->sent, FUTEX_WAIT, seen, NULL, NULL, 0);
            __atomic_store_n(&shared->sleeping, 0, __ATOMIC_SEQ_CST);
        }
        if (__atomic_load_n(&shared->stop, __ATOMIC_ACQUIRE)) _exit(0);
        seen = __atomic_load_n(&shared->sent, __ATOMIC_ACQUIRE);
        memcpy(buffer, shared->question, 100);
        memcpy(shared->answer, buffer, 100);
        __atomic_store_n(&shared->answered, seen, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(wake, &one, sizeof one) != sizeof one) _exit(0);
    }
}

/* The forwarder: answers what the asker sends on `client`, itself or (with `toward` and `back`
 * open) through the answerer, until the asker closes. */
static void forward(int client, int toward, int back) {
    int poller = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = client};
    if (poller < 0 || epoll_ctl(poller, EPOLL_CTL_ADD, client, &event) != 0) _exit(1);
    if (back >= 0) {
        event.data.fd = back;
        if (epoll_ctl(poller, EPOLL_CTL_ADD, back, &event) != 0) _exit(1);
    }
    char buffer[256];
    for (;;) {
        struct epoll_event ready[4];
        int count = epoll_wait(poller, ready, 4, -1);
        for (int n = 0; n < count; n++) {
            int from = ready[n].data.fd;
            ssize_t got = read(from, buffer, sizeof buffer);
            if (got <= 0) _exit(0);
            int to = from == client && toward >= 0 ? toward : client;
            if (write(to, buffer, (size_t)got) != got) _exit(0);
        }
    }
}

static double run_through_forwarder(enum mode mode, int count) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, (struct sockaddr *)&address, &length) != 0)
        return -1;
    int asker = socket(AF_INET, SOCK_STREAM, 0);
    if (asker < 0 || connect(asker, (struct sockaddr *)&address, sizeof address) != 0) return -1;
    int client = accept(listener, NULL, NULL);
    if (client < 0) return -1;
    int one = 1;
    setsockopt(asker, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    close(listener);
    int toward[2] = {-1, -1}, back[2] = {-1, -1};
    if (mode == RELAY && (pipe(toward) != 0 || pipe(back) != 0)) return -1;
    pid_t answerer = -1;
    if (mode == RELAY) {
        answerer = fork();
        if (answerer < 0) return -1;
        if (answerer == 0) {
            close(asker);
            close(client);
            close(toward[1]);
            close(back[0]);
            char buffer[256];
            for (;;) {
                ssize_t got = read(toward[0], buffer, sizeof buffer);
                if (got <= 0 || write(back[1], buffer, (size_t)got) != got) _exit(0);
            }
        }
        close(toward[0]);
        close(back[1]);
    }
    pid_t forwarder = fork();
    if (forwarder < 0) return -1;
    if (forwarder == 0) {
        close(asker);
        forward(client, toward[1], back[0]);
    }
    close(client);
    if (mode == RELAY) {
        close(toward[1]);
        close(back[0]);
    }
    char buffer[256] = {0};
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int n = 0; n < count; n++) {
        if (write(asker, buffer, 100) != 100) break;
        size_t have = 0;
        while (have < 100) {
            ssize_t got = read(asker, buffer, sizeof buffer);
            if (got <= 0) break;
            have += (size_t)got;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    /* The forwarder ends when the asker closes, and the answerer when the forwarder's ends close. */
    close(asker);
    waitpid(forwarder, NULL, 0);
    if (answerer > 0) waitpid(answerer, NULL, 0);
    return ((double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec)) / 1e3 / count;
}

static double run(enum mode mode, int count) {
    /* toward[1] → toward[0] carries questions, back[1] → back[0] answers. */
    if (mode == DIRECT || mode == RELAY) return run_through_forwarder(mode, count);
    int toward[2], back[2];
    struct shared *shared = NULL;
    if (mode == SOCKETPAIR) {
        /* One socket both ways: the asker's end is pair[0], the answerer's pair[1]. */
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return -1;
        toward[1] = back[0] = pair[0];
        toward[0] = back[1] = pair[1];
    } else if (mode == PIPES) {
        if (pipe(toward) != 0 || pipe(back) != 0) return -1;
    } else {
        shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED) return -1;
        memset(shared, 0, sizeof *shared);
        back[0] = back[1] = eventfd(0, 0);
        if (back[0] < 0) return -1;
    }
    char buffer[256] = {0};
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        if (mode == RING) answer_ring(shared, back[1]);
        /* The asker's ends: with them closed here, the asker closing its own ends the loop. */
        close(toward[1]);
        if (mode == PIPES) close(back[0]);
        for (;;) {
            if (mode == SOCKETPAIR) {
                struct pollfd ready = {toward[0], POLLIN, 0};
                if (poll(&ready, 1, -1) < 0) continue;
            }
            ssize_t got = read(toward[0], buffer, sizeof buffer);
            if (got <= 0 || write(back[1], buffer, (size_t)got) != got) _exit(0);
        }
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int n = 0; n < count; n++) {
        if (mode == RING) {
            memcpy(shared->question, buffer, 100);
            __atomic_store_n(&shared->sent, (uint32_t)n + 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&shared->sleeping, __ATOMIC_SEQ_CST))
                syscall(SYS_futex, &shared->sent, FUTEX_WAKE, 1, NULL, NULL, 0);
            uint64_t woken;
            while (__atomic_load_n(&shared->answered, __ATOMIC_ACQUIRE) != (uint32_t)n + 1) {
                if (read(back[0], &woken, sizeof woken) != sizeof woken) break;
            }
            memcpy(buffer, shared->answer, 100);
            continue;
        }
        if (write(toward[1], buffer, 100) != 100) break;
        size_t have = 0;
        while (have < 100) {
            ssize_t got = read(back[0], buffer, sizeof buffer);
            if (got <= 0) break;
            have += (size_t)got;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (mode == RING) {
        __atomic_store_n(&shared->stop, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&shared->sent, (uint32_t)count + 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &shared->sent, FUTEX_WAKE, 1, NULL, NULL, 0);
        waitpid(child, NULL, 0);
        close(back[0]);
        munmap(shared, sizeof *shared);
    } else {
        close(toward[1]);
        waitpid(child, NULL, 0);
        close(toward[0]);
        if (mode == PIPES) {
            close(back[0]);
            close(back[1]);
        }
    }
    return ((double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec)) / 1e3 / count;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 100000;
    const char *name = argc > 2 ? argv[2] : "pipes";
    enum mode mode = PIPES;
    if (strcmp(name, "socketpair") == 0) mode = SOCKETPAIR;
    else if (strcmp(name, "ring") == 0) mode = RING;
    else if (strcmp(name, "direct") == 0) mode = DIRECT;
    else if (strcmp(name, "relay") == 0) mode = RELAY;
    else if (strcmp(name, "pipes") != 0) count = 0;
    if (count < 1) {
        fprintf(stderr, "usage: ipcfloor [ROUND-TRIPS] [pipes|socketpair|ring|direct|relay]\n");
        return 2;
    }
    double runs[5];
    for (int n = 0; n < 5; n++) runs[n] = run(mode, count / 5 > 0 ? count / 5 : 1);
    qsort(runs, 5, sizeof runs[0], compare);
    printf("%.2f\n", runs[2]);
    return runs[2] < 0;
}
