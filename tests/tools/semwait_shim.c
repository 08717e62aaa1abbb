/*
 * tests/tools/semwait_shim.c — an LD_PRELOAD shim that holds the first
 * sem_wait of a process at the door, for tests/integration/test_signals.py.
 *
 * libfuse's threaded loop is `while (!exited) sem_wait(&finish);`.  A signal
 * that ends the session between the check and the wait is the race
 * fs/signals.h describes: with libfuse's own handler the loop then waits for a request
 * that may never come.  With GGUFFS_TEST_SEMWAIT_DIR set, the first
 * sem_wait of the process (the loop's, in gguffs) writes one byte to the
 * FIFO DIR/in, then waits for one byte from the FIFO DIR/go, then waits
 * for real: the test sends its signal in between, exactly in that window.
 * Calls interrupted by a signal are retried (the window must hold).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int sem_wait(sem_t *sem);

static int open_retry(const char *dir, const char *name, int flags)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd;
    while ((fd = open(path, flags)) < 0 && errno == EINTR)
        ;
    return fd;
}

int sem_wait(sem_t *sem)
{
    static atomic_flag once = ATOMIC_FLAG_INIT;
    int (*real)(sem_t *) = (int (*)(sem_t *))dlsym(RTLD_NEXT, "sem_wait");
    const char *dir = getenv("GGUFFS_TEST_SEMWAIT_DIR");
    if (dir && !atomic_flag_test_and_set(&once)) {
        int w = open_retry(dir, "in", O_WRONLY);
        if (w >= 0) {
            while (write(w, "w", 1) < 0 && errno == EINTR)
                ;
            close(w);
        }
        int r = open_retry(dir, "go", O_RDONLY);
        if (r >= 0) {
            char c;
            while (read(r, &c, 1) < 0 && errno == EINTR)
                ;
            close(r);
        }
    }
    return real(sem);
}
