/* The floor under what a worker process adds to a request: two bare processes passing 100
 * bytes back and forth over a socketpair, the answering one waiting in poll and then read as
 * a worker does. Prints the median of 5 runs of N round trips, in microseconds a round trip.
 * Benchmarks/workers.py builds and runs it (on core 0 with --pinned) beside its measurements.
 *
 *     cc -O2 -o ipcfloor Benchmarks/ipcfloor.c && ./ipcfloor 100000
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double run(int count) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return -1;
    char buffer[256] = {0};
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        close(pair[0]);
        for (;;) {
            struct pollfd ready = {pair[1], POLLIN, 0};
            if (poll(&ready, 1, -1) < 0) continue;
            ssize_t got = read(pair[1], buffer, sizeof buffer);
            if (got <= 0 || write(pair[1], buffer, (size_t)got) != got) _exit(0);
        }
    }
    close(pair[1]);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int n = 0; n < count; n++) {
        if (write(pair[0], buffer, 100) != 100) break;
        size_t have = 0;
        while (have < 100) {
            ssize_t got = read(pair[0], buffer, sizeof buffer);
            if (got <= 0) break;
            have += (size_t)got;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    close(pair[0]);
    waitpid(child, NULL, 0);
    return ((double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec)) / 1e3 / count;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 100000;
    if (count < 1) {
        fprintf(stderr, "usage: ipcfloor [ROUND-TRIPS]\n");
        return 2;
    }
    double runs[5];
    for (int n = 0; n < 5; n++) runs[n] = run(count / 5 > 0 ? count / 5 : 1);
    qsort(runs, 5, sizeof runs[0], compare);
    printf("%.2f\n", runs[2]);
    return runs[2] < 0;
}
