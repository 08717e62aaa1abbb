/*
 * tests/tools/thread_fail_shim.c — an LD_PRELOAD shim that fails one
 * pthread_create, for tests/integration/test_mount.py: a mount whose notify
 * threads cannot start must end, not serve with edits that the kernel's
 * caches never hear of.
 *
 * With GGUFFS_TEST_FAIL_REPEATED_THREAD set, the first pthread_create whose
 * start routine an earlier call of the process already started fails with
 * EAGAIN (once).  In gguffs -f -s -o threads=0 on a local model every
 * thread before the session's loop has a start routine of its own but the
 * notify queues', which share one: so the call that fails is the second
 * notify thread's.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef void *(*start_fn)(void *);
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, start_fn, void *);

#define SEEN_MAX 64

int pthread_create(pthread_t *th, const pthread_attr_t *attr, start_fn fn, void *arg)
{
    static _Atomic(start_fn) seen[SEEN_MAX];
    static atomic_int n_seen;
    static atomic_flag failed = ATOMIC_FLAG_INIT;
    create_fn real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (getenv("GGUFFS_TEST_FAIL_REPEATED_THREAD")) {
        int n = atomic_load(&n_seen);
        for (int i = 0; i < n && i < SEEN_MAX; i++)
            if (atomic_load(&seen[i]) == fn && !atomic_flag_test_and_set(&failed))
                return EAGAIN;
        int k = atomic_fetch_add(&n_seen, 1);
        if (k < SEEN_MAX)
            atomic_store(&seen[k], fn);
    }
    return real(th, attr, fn, arg);
}
