/*
 * Shifts a process's wall clock by an offset the test writes to a file:
 * loaded with LD_PRELOAD into a redis-server by tests/harness/clock.rs.
 *
 * CLOCK_REALTIME (and its coarse and TAI forms), gettimeofday() and time()
 * read the kernel's clock and add the offset (signed milliseconds, as
 * decimal text) from the file named by CLOCKSHIFT_FILE, read again on
 * every call. Monotonic clocks are left alone: Redis's key expiry follows
 * its wall clock, its timers the monotonic one, as on a real machine
 * whose clock is stepped.
 *
 * Raw system calls only: no malloc, no dlsym, no stdio (libfaketime,
 * which resolves the real functions with dlsym, deadlocks with the
 * jemalloc build of Debian's redis-server).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char path[512];

__attribute__((constructor)) static void clockshift_init(void) {
    extern char **environ;
    const char *name = "CLOCKSHIFT_FILE=";
    for (char **e = environ; e && *e; e++) {
        const char *v = *e;
        int i = 0;
        while (name[i] && v[i] == name[i]) i++;
        if (name[i] == 0) {
            int j = 0;
            while (v[i + j] && j < (int)sizeof(path) - 1) {
                path[j] = v[i + j];
                j++;
            }
            path[j] = 0;
            return;
        }
    }
}

/* The offset in nanoseconds (0 if the file is missing or unreadable). */
static long long offset_ns(void) {
    if (!path[0]) return 0;
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[32];
    long n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return 0;
    long long ms = 0;
    int neg = 0, i = 0;
    if (buf[0] == '-') { neg = 1; i = 1; }
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) ms = ms * 10 + (buf[i] - '0');
    return (neg ? -ms : ms) * 1000000LL;
}

static int wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI;
}

static void shift(struct timespec *ts, long long by) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + by;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) { ts->tv_nsec += 1000000000LL; ts->tv_sec -= 1; }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && wall(id)) shift(ts, offset_ns());
    return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    long r = syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    if (r != 0) return (int)r;
    shift(&ts, offset_ns());
    struct timeval *volatile out = tv; /* declared nonnull; checked anyway */
    if (out) {
        out->tv_sec = ts.tv_sec;
        out->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    shift(&ts, offset_ns());
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
