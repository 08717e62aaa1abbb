/*
 * cache/thread.h — starting a helper thread that takes no signal.
 *
 * Promises:
 *   - cache_thread_start(th, fn, arg) is pthread_create(th, NULL, fn, arg)
 *     with every signal blocked in the new thread, whatever the caller's
 *     mask; the caller's own mask is unchanged.  Returns pthread_create's
 *     result (0 or an errno).
 *   - Why: the signals that end gguffs are taken by its signal thread, and
 *     the wake that interrupts the FUSE loop goes to the loop's thread
 *     (signals.h); a helper (a dequantization worker, a fetcher, a flusher)
 *     that took one would have a system call cut short for nothing.
 *
 * No FUSE here: the block caches (cache.c, blocksrc.c, diskcache.c) use it.
 */
#ifndef CACHE_THREAD_H
#define CACHE_THREAD_H

#include <pthread.h>

int cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);

#endif
