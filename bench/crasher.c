/* Benchmark child: logs when it started and when it is about to crash, then exits 1.
 * With BENCH_WAIT set it instead waits for SIGTERM and exits 0 (stop latency, idle cost). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void record(const char *path, char tag, long long ns) {
    char line[64];
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd < 0) return;
    int n = snprintf(line, sizeof line, "%c %lld %d\n", tag, ns, (int)getpid());
    if (write(fd, line, (size_t)n) < 0) { /* nothing to do in a benchmark child */ }
    close(fd);
}

int main(void) {
    long long started = now_ns();
    const char *path = getenv("BENCH_LOG");
    if (getenv("BENCH_WAIT")) {
        for (;;) pause();
    }
    if (path) {
        record(path, 'S', started);
        record(path, 'E', now_ns());
    }
    _exit(1);
}
