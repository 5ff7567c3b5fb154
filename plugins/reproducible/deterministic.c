/*
 * Preloaded (LD_PRELOAD) into the tools that snapshot a plugin's interpreter —
 * componentize-js's wizer, componentize-py — so that the same source gives the same
 * component. The snapshot is the guest's memory after its initialisation, and what the
 * guest read there from the host ends up in it: random bytes (hash seeds, the engine's
 * PRNG), the clocks, the files' times and inode numbers. Here each of those reads the
 * same on every build:
 *
 *   getrandom(2)      the same bytes for every call (a fixed splitmix64 stream), also
 *                     through syscall(SYS_getrandom, …)
 *   clock_gettime     CLOCK_REALTIME at SOURCE_DATE_EPOCH (default 1980-01-01);
 *                     CLOCK_MONOTONIC advancing 1 µs per call on each thread
 *   stat and statx    times at SOURCE_DATE_EPOCH, inode 1 (also through syscall)
 *
 * The calls the runtime makes itself, past libc, are reached by stable_dev.c (linked
 * into the same library): the device number of the build's own file system.
 *
 * Only for those build tools: nothing else should run with it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Every call gets the stream from its start: callers on several threads, in whatever
 * order they run, each see the same bytes. */
ssize_t getrandom(void *buf, size_t len, unsigned flags) {
    (void)flags;
    unsigned char *p = buf;
    uint64_t state = 0x5eed, word = 0;
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) word = splitmix64(&state);
        p[i] = (unsigned char)(word >> (8 * (i % 8)));
    }
    return (ssize_t)len;
}

int getentropy(void *buf, size_t len) {
    getrandom(buf, len, 0);
    return 0;
}

static time_t epoch(void) {
    static time_t value = -1;
    if (value < 0) {
        const char *s = getenv("SOURCE_DATE_EPOCH");
        value = s ? (time_t)strtoll(s, NULL, 10) : 315532800;
    }
    return value;
}

static void fixed_times(struct stat *st) {
    st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = epoch();
    st->st_atim.tv_nsec = st->st_mtim.tv_nsec = st->st_ctim.tv_nsec = 0;
    st->st_ino = 1;
}

static void fixed_statx(struct statx *sx) {
    sx->stx_atime.tv_sec = sx->stx_mtime.tv_sec = epoch();
    sx->stx_ctime.tv_sec = sx->stx_btime.tv_sec = epoch();
    sx->stx_atime.tv_nsec = sx->stx_mtime.tv_nsec = 0;
    sx->stx_ctime.tv_nsec = sx->stx_btime.tv_nsec = 0;
    sx->stx_ino = 1;
}

#define REAL(name, type)                                                                    \
    static type real;                                                                       \
    if (!real) real = (type)dlsym(RTLD_NEXT, name)

typedef int (*xstat_t)(int, const char *, struct stat *);
typedef int (*fxstat_t)(int, int, struct stat *);
typedef int (*fxstatat_t)(int, int, const char *, struct stat *, int);
typedef int (*statx_t)(int, const char *, int, unsigned, struct statx *);
typedef int (*clock_t_)(clockid_t, struct timespec *);
typedef long (*syscall_t)(long, ...);

int __xstat64(int v, const char *path, struct stat *st) {
    REAL("__xstat64", xstat_t);
    int r = real(v, path, st);
    if (r == 0) fixed_times(st);
    return r;
}

int __lxstat64(int v, const char *path, struct stat *st) {
    REAL("__lxstat64", xstat_t);
    int r = real(v, path, st);
    if (r == 0) fixed_times(st);
    return r;
}

int __fxstat64(int v, int fd, struct stat *st) {
    REAL("__fxstat64", fxstat_t);
    int r = real(v, fd, st);
    if (r == 0) fixed_times(st);
    return r;
}

int __fxstatat64(int v, int dir, const char *path, struct stat *st, int flags) {
    REAL("__fxstatat64", fxstatat_t);
    int r = real(v, dir, path, st, flags);
    if (r == 0) fixed_times(st);
    return r;
}

int statx(int dir, const char *path, int flags, unsigned mask, struct statx *sx) {
    REAL("statx", statx_t);
    int r = real(dir, path, flags, mask, sx);
    if (r == 0) fixed_statx(sx);
    return r;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    REAL("clock_gettime", clock_t_);
    static long long base = -1;
    static __thread long long calls;
    int r = real(id, ts);
    if (r != 0) return r;
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
        ts->tv_sec = epoch();
        ts->tv_nsec = 0;
    } else if (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_BOOTTIME) {
        long long now = ts->tv_sec * 1000000000LL + ts->tv_nsec;
        if (base < 0) base = now;
        long long fake = base + 1000LL * ++calls;
        ts->tv_sec = fake / 1000000000LL;
        ts->tv_nsec = fake % 1000000000LL;
    }
    return 0;
}

long syscall(long n, ...) {
    REAL("syscall", syscall_t);
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_getrandom) return getrandom((void *)a[0], (size_t)a[1], (unsigned)a[2]);
    long r = real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
    if (n == SYS_statx && r == 0) fixed_statx((struct statx *)a[4]);
    return r;
}
