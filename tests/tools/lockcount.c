/*
 * tests/tools/lockcount.c — an LD_PRELOAD shim that counts the pthread
 * lock takes of a process per call site, and the FUSE replies it sends,
 * in a window the caller opens and closes (tests/integration/lockcount.py
 * drives it: scripts/bench --part locks, tests/integration/test_locks.py).
 *
 * Wrapped (dlsym(RTLD_NEXT) to the real ones): pthread_mutex_lock,
 * _trylock and _timedlock; pthread_rwlock_rdlock, _wrlock, _tryrdlock,
 * _trywrlock, _timedrdlock and _timedwrlock; pthread_spin_lock and
 * _trylock; and, counted apart as waits (a wait takes its mutex again
 * when it wakes), pthread_cond_wait and _timedwait.  Only calls that go
 * through the dynamic linker are seen: gguffs' own and its libraries'
 * (libfuse, libcurl, libgcc's unwinder), not glibc's internal locks
 * (malloc, stdio).  Each take is counted under (function, the caller's
 * address, the address the caller returns to), so a take inside a small
 * helper is told apart by who called the helper.  The FUSE replies
 * (fuse_reply_buf, _iov, _data, _err, ...) are counted by function: in a
 * window where the caller keeps its files open, each is one request.
 *
 * Counting is off until the window opens.  With GGUFFS_LOCKCOUNT_SOCK
 * set, a thread of the shim (every signal blocked) listens on that Unix
 * socket; each connection sends one command line and reads the answer
 * until the shim closes it:
 *
 *   start   counting off, every count zeroed, counting on; answers "ok"
 *   stop    counting off; answers "ok"
 *   dump    one line per call site with a count, then "end":
 *             take KIND COUNT OBJ1 OFF1 SYM1 OBJ2 OFF2 SYM2
 *             reply NAME COUNT
 *           OBJ is the file of the object the address lies in, OFF the
 *           address less that object's base in hex (what addr2line -e OBJ
 *           takes), SYM the nearest dynamic symbol or "-".
 *
 * Counts are atomics in a table of fixed size (no allocation while
 * counting); a site past its capacity is counted as "overflow".  A
 * take made while the shim itself runs (the unwinder's own locks) is
 * not counted.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum kind {
    MUTEX_LOCK, MUTEX_TRYLOCK, MUTEX_TIMEDLOCK,
    RW_RDLOCK, RW_WRLOCK, RW_TRYRDLOCK, RW_TRYWRLOCK, RW_TIMEDRDLOCK, RW_TIMEDWRLOCK,
    SPIN_LOCK, SPIN_TRYLOCK, COND_WAIT, COND_TIMEDWAIT, N_KIND
};
static const char *const kind_name[N_KIND] = {
    "pthread_mutex_lock", "pthread_mutex_trylock", "pthread_mutex_timedlock",
    "pthread_rwlock_rdlock", "pthread_rwlock_wrlock", "pthread_rwlock_tryrdlock",
    "pthread_rwlock_trywrlock", "pthread_rwlock_timedrdlock", "pthread_rwlock_timedwrlock",
    "pthread_spin_lock", "pthread_spin_trylock", "pthread_cond_wait", "pthread_cond_timedwait"
};

enum reply {
    R_BUF, R_IOV, R_DATA, R_ERR, R_OPEN, R_ATTR, R_ENTRY, R_CREATE, R_WRITE, R_NONE,
    R_XATTR, R_STATFS, R_READLINK, N_REPLY
};
static const char *const reply_name[N_REPLY] = {
    "fuse_reply_buf", "fuse_reply_iov", "fuse_reply_data", "fuse_reply_err",
    "fuse_reply_open", "fuse_reply_attr", "fuse_reply_entry", "fuse_reply_create",
    "fuse_reply_write", "fuse_reply_none", "fuse_reply_xattr", "fuse_reply_statfs",
    "fuse_reply_readlink"
};

/* one call site: claimed once (state 0 -> 1 -> 2), counted after */
#define SLOTS 4096
struct slot {
    atomic_int state;               /* 0 free, 1 being written, 2 ready */
    int kind;
    uintptr_t pc1, pc2;
    atomic_ullong n;
};
static struct slot slots[SLOTS];
static atomic_ullong overflow;
static atomic_ullong replies[N_REPLY];
static atomic_int counting;
static _Thread_local int inside;    /* the shim is running on this thread */

static void *real(const char *name)
{
    /* the condition variables' current version, not the compat one
     * dlsym would give (which waits on old-style condition variables) */
    void *f = !strncmp(name, "pthread_cond_", 13) ? dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2")
                                                   : dlsym(RTLD_NEXT, name);
    if (!f) {
        static const char msg[] = "lockcount: a wrapped function is missing\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    return f;
}

/* the real function, looked up once (racing lookups find the same one) */
#define REAL(name) \
    static _Atomic(__typeof__(&name)) real_##name; \
    __typeof__(&name) f_ = atomic_load_explicit(&real_##name, memory_order_relaxed); \
    if (!f_) { \
        f_ = (__typeof__(&name))real(#name); \
        atomic_store_explicit(&real_##name, f_, memory_order_relaxed); \
    }

static struct slot *find(int kind, uintptr_t pc1, uintptr_t pc2)
{
    uint64_t h = (uint64_t)pc1 * 0x9e3779b97f4a7c15ull ^ (uint64_t)pc2 * 0xc2b2ae3d27d4eb4full ^
                 (uint64_t)kind;
    for (unsigned i = 0; i < 64; i++) {
        struct slot *s = &slots[(h + i) % SLOTS];
        int st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == 0) {
            int zero = 0;
            if (atomic_compare_exchange_strong(&s->state, &zero, 1)) {
                s->kind = kind;
                s->pc1 = pc1;
                s->pc2 = pc2;
                atomic_store_explicit(&s->state, 2, memory_order_release);
                return s;
            }
            st = zero;
        }
        while (st == 1)         /* another thread is writing this key */
            st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (s->kind == kind && s->pc1 == pc1 && s->pc2 == pc2)
            return s;
    }
    return NULL;
}

/* counts one take by the function that called the wrapper (pc1), told
 * apart by its own caller (found in the stack above pc1) */
__attribute__((noinline)) static void count(int kind, void *pc1)
{
    if (!atomic_load_explicit(&counting, memory_order_relaxed) || inside)
        return;
    inside = 1;
    void *bt[8];
    int n = backtrace(bt, 8);
    uintptr_t pc2 = 0;
    for (int i = 0; i + 1 < n; i++)
        if (bt[i] == pc1) {
            pc2 = (uintptr_t)bt[i + 1];
            break;
        }
    struct slot *s = find(kind, (uintptr_t)pc1, pc2);
    if (s)
        atomic_fetch_add_explicit(&s->n, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&overflow, 1, memory_order_relaxed);
    inside = 0;
}

#define WRAP1(ret, name, kind, T) \
    ret name(T a) \
    { \
        REAL(name) \
        count(kind, __builtin_return_address(0)); \
        return f_(a); \
    }
#define WRAP2(ret, name, kind, T, U) \
    ret name(T a, U b) \
    { \
        REAL(name) \
        count(kind, __builtin_return_address(0)); \
        return f_(a, b); \
    }
#define WRAP3(ret, name, kind, T, U, V) \
    ret name(T a, U b, V c) \
    { \
        REAL(name) \
        count(kind, __builtin_return_address(0)); \
        return f_(a, b, c); \
    }

WRAP1(int, pthread_mutex_lock, MUTEX_LOCK, pthread_mutex_t *)
WRAP1(int, pthread_mutex_trylock, MUTEX_TRYLOCK, pthread_mutex_t *)
WRAP2(int, pthread_mutex_timedlock, MUTEX_TIMEDLOCK, pthread_mutex_t *, const struct timespec *)
WRAP1(int, pthread_rwlock_rdlock, RW_RDLOCK, pthread_rwlock_t *)
WRAP1(int, pthread_rwlock_wrlock, RW_WRLOCK, pthread_rwlock_t *)
WRAP1(int, pthread_rwlock_tryrdlock, RW_TRYRDLOCK, pthread_rwlock_t *)
WRAP1(int, pthread_rwlock_trywrlock, RW_TRYWRLOCK, pthread_rwlock_t *)
WRAP2(int, pthread_rwlock_timedrdlock, RW_TIMEDRDLOCK, pthread_rwlock_t *, const struct timespec *)
WRAP2(int, pthread_rwlock_timedwrlock, RW_TIMEDWRLOCK, pthread_rwlock_t *, const struct timespec *)
WRAP1(int, pthread_spin_lock, SPIN_LOCK, pthread_spinlock_t *)
WRAP1(int, pthread_spin_trylock, SPIN_TRYLOCK, pthread_spinlock_t *)
WRAP2(int, pthread_cond_wait, COND_WAIT, pthread_cond_t *, pthread_mutex_t *)
WRAP3(int, pthread_cond_timedwait, COND_TIMEDWAIT, pthread_cond_t *, pthread_mutex_t *,
      const struct timespec *)

/* ---- the FUSE replies (declared here: the shim includes no FUSE header) ---- */

#define WRAP_REPLY(name, idx, params, args) \
    int name params; \
    int name params \
    { \
        REAL(name) \
        if (atomic_load_explicit(&counting, memory_order_relaxed)) \
            atomic_fetch_add_explicit(&replies[idx], 1, memory_order_relaxed); \
        return f_ args; \
    }

struct iovec;
WRAP_REPLY(fuse_reply_buf, R_BUF, (void *req, const char *buf, size_t size), (req, buf, size))
WRAP_REPLY(fuse_reply_iov, R_IOV, (void *req, const struct iovec *iov, int count),
           (req, iov, count))
WRAP_REPLY(fuse_reply_data, R_DATA, (void *req, void *bufv, int flags), (req, bufv, flags))
WRAP_REPLY(fuse_reply_err, R_ERR, (void *req, int err), (req, err))
WRAP_REPLY(fuse_reply_open, R_OPEN, (void *req, const void *fi), (req, fi))
WRAP_REPLY(fuse_reply_attr, R_ATTR, (void *req, const void *attr, double timeout),
           (req, attr, timeout))
WRAP_REPLY(fuse_reply_entry, R_ENTRY, (void *req, const void *e), (req, e))
WRAP_REPLY(fuse_reply_create, R_CREATE, (void *req, const void *e, const void *fi), (req, e, fi))
WRAP_REPLY(fuse_reply_write, R_WRITE, (void *req, size_t count), (req, count))
WRAP_REPLY(fuse_reply_xattr, R_XATTR, (void *req, size_t count), (req, count))
WRAP_REPLY(fuse_reply_statfs, R_STATFS, (void *req, const void *stbuf), (req, stbuf))
WRAP_REPLY(fuse_reply_readlink, R_READLINK, (void *req, const char *link), (req, link))

void fuse_reply_none(void *req);
void fuse_reply_none(void *req)
{
    REAL(fuse_reply_none)
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&replies[R_NONE], 1, memory_order_relaxed);
    f_(req);
}

/* ---- the control socket ------------------------------------------------------ */

static void where(uintptr_t pc, char *out, size_t cap)
{
    Dl_info di;
    if (!pc || !dladdr((void *)pc, &di) || !di.dli_fbase) {
        snprintf(out, cap, "? %#lx -", (unsigned long)pc);
        return;
    }
    char exe[PATH_MAX];
    const char *obj = di.dli_fname;
    if (!obj || !obj[0] || !strchr(obj, '/')) {
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k > 0 ? k : 0] = '\0';
        obj = exe;
    }
    snprintf(out, cap, "%s %#lx %s", obj[0] ? obj : "?", (unsigned long)(pc - (uintptr_t)di.dli_fbase),
             di.dli_sname ? di.dli_sname : "-");
}

static void dump(FILE *f)
{
    char a[PATH_MAX + 300], b[PATH_MAX + 300];
    for (unsigned i = 0; i < SLOTS; i++) {
        struct slot *s = &slots[i];
        unsigned long long n = atomic_load(&s->n);
        if (atomic_load(&s->state) != 2 || !n)
            continue;
        where(s->pc1, a, sizeof a);
        where(s->pc2, b, sizeof b);
        fprintf(f, "take %s %llu %s %s\n", kind_name[s->kind], n, a, b);
    }
    if (atomic_load(&overflow))
        fprintf(f, "take overflow %llu ? 0 - ? 0 -\n", atomic_load(&overflow));
    for (int r = 0; r < N_REPLY; r++)
        if (atomic_load(&replies[r]))
            fprintf(f, "reply %s %llu\n", reply_name[r], atomic_load(&replies[r]));
    fprintf(f, "end\n");
}

static void *serve(void *arg)
{
    int ls = (int)(intptr_t)arg;
    inside = 1;                     /* this thread's own takes are not counted */
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        char line[64];
        size_t got = 0;
        ssize_t r;
        while (got < sizeof line - 1 && (r = read(c, line + got, sizeof line - 1 - got)) != 0) {
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                break;
            got += (size_t)r;
            if (memchr(line, '\n', got))
                break;
        }
        line[got] = '\0';
        FILE *f = fdopen(c, "w");
        if (!f) {
            close(c);
            continue;
        }
        if (!strncmp(line, "start\n", 6)) {
            atomic_store(&counting, 0);
            for (unsigned i = 0; i < SLOTS; i++)
                atomic_store(&slots[i].n, 0);
            atomic_store(&overflow, 0);
            for (int k = 0; k < N_REPLY; k++)
                atomic_store(&replies[k], 0);
            atomic_store(&counting, 1);
            fputs("ok\n", f);
        } else if (!strncmp(line, "stop\n", 5)) {
            atomic_store(&counting, 0);
            fputs("ok\n", f);
        } else if (!strncmp(line, "dump\n", 5)) {
            dump(f);
        } else {
            fputs("error: unknown command\n", f);
        }
        fclose(f);
    }
}

__attribute__((constructor)) static void lockcount_init(void)
{
    void *bt[2];
    inside = 1;
    backtrace(bt, 2);               /* loads the unwinder now, not while counting */
    inside = 0;
    const char *path = getenv("GGUFFS_LOCKCOUNT_SOCK");
    if (!path || !path[0])
        return;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "lockcount: %s: socket path too long\n", path);
        return;
    }
    strcpy(sa.sun_path, path);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 4) < 0) {
        fprintf(stderr, "lockcount: %s: %s\n", path, strerror(errno));
        if (ls >= 0)
            close(ls);
        return;
    }
    /* the thread takes no signal: the process's own handling stays as it is */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, NULL, serve, (void *)(intptr_t)ls) == 0)
        pthread_detach(t);
    else
        fprintf(stderr, "lockcount: no control thread\n");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
