/* A stand-in for busybox's `nmeter`, for the kit's busybox image (Debian's busybox-static
 * has no nmeter applet). Only what the e2e_node container-lifecycle specs ask of it:
 *
 *     nmeter -d0 '%3t' | head -n1        ->  the wall clock as HH:MM:SS.mmm
 *
 * Supported: `-d MSEC` (interval between lines; 0 = none), and a format of literal text,
 * `%%` and `%[N]t` (the time of day, N = 0..6 decimals). Any other `%` item is refused by
 * name, so a spec asking for more fails loudly instead of logging something wrong.
 * Lines go to stdout until a write fails (the reader closed the pipe). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int check_format(const char *fmt) {
    for (const char *p = fmt; *p; p++) {
        if (*p != '%')
            continue;
        p++;
        if (*p == '%')
            continue;
        if (*p >= '0' && *p <= '6')
            p++;
        if (*p != 't') {
            fprintf(stderr, "nmeter (wasmlet testbed stand-in): unsupported item %%%c in '%s'\n",
                    *p ? *p : '?', fmt);
            return -1;
        }
    }
    return 0;
}

static void put_time(FILE *out, int decimals) {
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    localtime_r(&now.tv_sec, &tm);
    fprintf(out, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
    if (decimals > 0) {
        long frac = now.tv_nsec;
        for (int i = decimals; i < 9; i++)
            frac /= 10;
        fprintf(out, ".%0*ld", decimals, frac);
    }
}

static int put_line(const char *fmt) {
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            putchar(*p);
            continue;
        }
        p++;
        if (*p == '%') {
            putchar('%');
            continue;
        }
        int decimals = 0;
        if (*p >= '0' && *p <= '6')
            decimals = *p++ - '0';
        put_time(stdout, decimals);
    }
    putchar('\n');
    return fflush(stdout) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    long interval_ms = 1000;
    int opt;
    while ((opt = getopt(argc, argv, "d:")) != -1) {
        if (opt != 'd') {
            fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n");
            return 1;
        }
        interval_ms = strtol(optarg, NULL, 10);
    }
    if (optind != argc - 1) {
        fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n");
        return 1;
    }
    const char *fmt = argv[optind];
    if (check_format(fmt) != 0)
        return 1;
    struct timespec pause = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
    while (put_line(fmt) == 0) {
        if (interval_ms > 0)
            nanosleep(&pause, NULL);
    }
    return errno == EPIPE ? 0 : 1;
}
