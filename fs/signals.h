/*
 * fs/signals.h — how SIGHUP, SIGINT and SIGTERM end gguffs, at every moment.
 *
 * Before the FUSE session exists a signal ends the process by its default
 * action (nothing is mounted yet).  From signals_attach on, the three are
 * blocked in the thread that mounts and runs the loop, and so in every
 * thread it starts (libfuse's, gguffs' and libcurl's); one thread, started
 * by signals_start after the daemon's fork, takes them (sigwait).  A signal
 * that comes in between stays pending and is taken then.  Then the session
 * ends: its loop returns, gguffs unmounts and exits with status 0 —
 * whether the signal came before the mount, during it, before the loop
 * started, while the loop ran or while it was checking whether to stop.
 * The signal thread is started after the fork, not before: a process that
 * forks while another thread runs can inherit a lock that thread held (a
 * sanitizer's allocator did, and the daemon hung), and gguffs forks with no
 * thread of its own.
 *
 * Why the window is empty (libfuse's own handlers left one): libfuse's loop
 * is `while (!exited) wait;`, the wait being sem_wait (threaded loop) or
 * read(/dev/fuse) (-s).  A handler that sets `exited` and lands between the
 * check and the wait is missed until another request comes (a hang under
 * load).  Here the signal thread sets `exited` and then
 * interrupts the loop's thread with SIGNALS_WAKE — again every 10 ms until
 * the loop has returned.  SIGNALS_WAKE is blocked everywhere except in the
 * loop's thread while it runs the loop, and its handler does nothing: each
 * wake makes the wait return EINTR, so the check runs again; a wake that
 * lands just before the wait is followed by the next one, which finds the
 * thread waiting.  Outside the loop the wake stays blocked, so it cannot
 * interrupt a system call of the mount, the unmount or an edit's commit.
 * (tests/integration/test_signals.py holds the loop in that window with a
 * sem_wait shim and signals it there.)
 *
 * Promises:
 *   - signals_init(), first in main: SIGNALS_WAKE blocked (every thread
 *     inherits that) with a handler that does nothing; SIGPIPE ignored (a
 *     closed pipe is an error return, not a death).
 *   - signals_attach(se), on the thread that will run the loop, before the
 *     mount: the three blocked there; from now on a signal ends se's loop.
 *   - signals_start(), after fuse_daemonize, on that thread: the signal
 *     thread.  false (and a message) if it cannot: the caller unmounts and
 *     exits.
 *   - signals_loop_enter() just before the loop, signals_loop_leave() right
 *     after it, on the loop's thread.
 *   - signals_stop(): ends the signal thread; signals that come later
 *     stay pending until the process exits (it is on its way out).
 */
#ifndef GGUFFS_FS_SIGNALS_H
#define GGUFFS_FS_SIGNALS_H

#include <signal.h>
#include <stdbool.h>

struct fuse_session;

/* Interrupts the loop's wait; a user who sends it changes nothing. */
#define SIGNALS_WAKE SIGUSR1

void signals_init(void);
void signals_attach(struct fuse_session *se);
bool signals_start(void);
void signals_loop_enter(void);
void signals_loop_leave(void);
void signals_stop(void);

#endif
