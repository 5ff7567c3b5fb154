/*
 * The second half of deterministic.so: the device number of the build's own file system.
 *
 * componentize-py's runtime (wasmtime) gives the guest a "metadata hash" for each file it
 * stats or lists: a hash of the file's device and inode numbers, which the guest keeps as
 * its inode number (and leaves in freed memory the snapshot keeps). A fresh tmpfs numbers
 * the build's inodes alike every time, but its device number is the lowest anonymous one
 * free when it is mounted: another tmpfs, overlay or build mounted meanwhile moves it, and
 * about 60 bytes of the component with it. wasmtime makes those calls itself (rustix's
 * raw system calls), so no preloaded libc function sees them.
 *
 * When WASMLET_STABLE_DEV names a directory and this process's executable is the one
 * WASMLET_STABLE_DEV_FOR names (a file name: componentize-py, not a wrapper script in
 * front of it), that directory's file system reads as device 0:0 (no real file system
 * has it) in every stat, fstat, lstat, newfstatat and statx of the process: a seccomp
 * filter traps those calls, and the SIGSYS handler makes the call again, marked so the
 * filter lets it through, and rewrites that one device number in the result. Nothing
 * else changes. A filter outlives exec and its handler does not, so exec is refused
 * (EPERM, and a line on stderr saying why): componentize-py does not exec. Without
 * seccomp (another architecture, or a kernel or container that refuses the filter) a
 * warning says so and the build goes on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/stat.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__aarch64__)

/* The handler's own calls carry this as their sixth argument, which none of the stat
 * calls uses; the filter lets those through. */
#define MARK 0x5741534d4c4554ULL

typedef long (*syscall_t)(long, ...);
static syscall_t real_syscall;
static dev_t stable_dev;

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
static const int regs[6] = {REG_RDI, REG_RSI, REG_RDX, REG_R10, REG_R8, REG_R9};
#define ARG(uc, i) ((long)(uc)->uc_mcontext.gregs[regs[i]])
#define SET_RETURN(uc, v) ((uc)->uc_mcontext.gregs[REG_RAX] = (v))
static const long trapped[] = {SYS_stat,       SYS_fstat, SYS_lstat,  SYS_newfstatat,
                               SYS_statx,      SYS_execve, SYS_execveat};
#else
#define ARCH AUDIT_ARCH_AARCH64
#define ARG(uc, i) ((long)(uc)->uc_mcontext.regs[i])
#define SET_RETURN(uc, v) ((uc)->uc_mcontext.regs[0] = (v))
static const long trapped[] = {SYS_fstat, SYS_newfstatat, SYS_statx, SYS_execve, SYS_execveat};
#endif
#define TRAPPED (sizeof trapped / sizeof trapped[0])

/* Where the call put its result: a struct statx for statx, a struct stat otherwise. */
static void stable_result(long nr, const long *a) {
    if (nr == SYS_statx) {
        struct statx *sx = (struct statx *)a[4];
        if (makedev(sx->stx_dev_major, sx->stx_dev_minor) == stable_dev)
            sx->stx_dev_major = sx->stx_dev_minor = 0;
        return;
    }
    struct stat *st = (struct stat *)(nr == SYS_newfstatat ? a[2] : a[1]);
    if (st->st_dev == stable_dev) st->st_dev = 0;
}

static void on_sigsys(int sig, siginfo_t *info, void *context) {
    (void)sig;
    ucontext_t *uc = context;
    if (info->si_syscall == SYS_execve || info->si_syscall == SYS_execveat) {
        static const char why[] = "deterministic.so: exec refused: this process's stat calls "
                                  "are trapped (WASMLET_STABLE_DEV), and a new program would "
                                  "be killed by the trap\n";
        real_syscall(SYS_write, 2, why, sizeof why - 1, 0, 0, (long)MARK);
        SET_RETURN(uc, -EPERM);
        return;
    }
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = ARG(uc, i);
    int saved = errno;
    long r = real_syscall(info->si_syscall, a[0], a[1], a[2], a[3], a[4], (long)MARK);
    if (r == -1) r = -errno;
    errno = saved;
    if (r == 0) stable_result(info->si_syscall, a);
    SET_RETURN(uc, r);
}

#define LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define RETURN(action) BPF_STMT(BPF_RET | BPF_K, action)

/* Allow everything but the stat and exec calls; those trap unless they carry the mark. */
static int install_filter(void) {
    size_t mark_at = offsetof(struct seccomp_data, args) + 5 * sizeof(__u64);
    struct sock_filter prog[11 + TRAPPED];
    size_t n = 0;
    prog[n++] = (struct sock_filter)LOAD(arch);
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0);
    prog[n++] = (struct sock_filter)RETURN(SECCOMP_RET_ALLOW);
    prog[n++] = (struct sock_filter)LOAD(nr);
    for (size_t i = 0; i < TRAPPED; i++) /* a match jumps to the mark's check */
        prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, trapped[i],
                                                 (__u8)(TRAPPED - i), 0);
    prog[n++] = (struct sock_filter)RETURN(SECCOMP_RET_ALLOW);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, mark_at);
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (__u32)MARK, 0, 3);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, mark_at + 4);
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (__u32)(MARK >> 32), 0, 1);
    prog[n++] = (struct sock_filter)RETURN(SECCOMP_RET_ALLOW);
    prog[n++] = (struct sock_filter)RETURN(SECCOMP_RET_TRAP);
    struct sock_fprog fprog = {.len = (unsigned short)n, .filter = prog};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return (int)real_syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                             &fprog);
}

static void warn(const char *what) {
    fprintf(stderr,
            "deterministic.so: warning: %s (%s): the build's device number is not held "
            "still, and the component may differ from another build's\n",
            what, strerror(errno));
}

/* Whether this process's executable is called `name`. */
static int is_the_program(const char *name) {
    char exe[4096];
    ssize_t n = name ? readlink("/proc/self/exe", exe, sizeof exe - 1) : -1;
    if (n <= 0) return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    return strcmp(base ? base + 1 : exe, name) == 0;
}

__attribute__((constructor)) static void stable_dev_init(void) {
    const char *dir = getenv("WASMLET_STABLE_DEV");
    struct stat st;
    if (!dir || !*dir || !is_the_program(getenv("WASMLET_STABLE_DEV_FOR"))) return;
    real_syscall = (syscall_t)dlsym(RTLD_NEXT, "syscall");
    if (!real_syscall || stat(dir, &st) != 0) {
        warn(dir);
        return;
    }
    stable_dev = st.st_dev;
    struct sigaction action = {.sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO | SA_NODEFER};
    if (sigaction(SIGSYS, &action, NULL) != 0)
        warn("sigaction(SIGSYS)");
    else if (install_filter() != 0)
        warn("seccomp");
}

#else

__attribute__((constructor)) static void stable_dev_init(void) {
    if (getenv("WASMLET_STABLE_DEV"))
        fprintf(stderr, "deterministic.so: warning: no seccomp trap on this architecture: "
                        "the build's device number is not held still\n");
}

#endif
