/*
 * fs/signals.h — how SIGHUP, SIGINT and SIGTERM end gguffs, at every moment.
 *
 * One thread takes the three signals (sigwait); no other thread ever can,
 * because they are blocked before the first thread exists.  A signal before
 * the FUSE session exists ends the process as the default action would
 * (nothing is mounted yet).  A signal after it ends the session: its loop
 * returns, gguffs unmounts and exits with status 0 — whether the signal
 * came before the mount, during it, before the loop started, while the loop
 * ran or while it was checking whether to stop.
 *
 * Why the window is empty (libfuse's own handlers left one): libfuse's loop
 * is `while (!exited) wait;`, the wait being sem_wait (threaded loop) or
 * read(/dev/fuse) (-s).  A handler that sets `exited` and lands between the
 * check and the wait is missed until another request comes (seen as a hang
 * under load, issue 20).  Here the signal thread sets `exited` and then
 * interrupts the loop's thread with SIGNALS_WAKE — again every 10 ms until
 * the loop has returned.  SIGNALS_WAKE is blocked everywhere except in the
 * loop's thread while it runs the loop, and its handler does nothing: each
 * wake makes the wait return EINTR, so the check runs again; a wake that
 * lands just before the wait is followed by the next one, which finds the
 * thread waiting.  Outside the loop the wake stays blocked, so it cannot
 * interrupt a system call of the mount, the unmount or an edit's commit.
 *
 * Promises:
 *   - signals_init(), first in main (one thread only): blocks the three
 *     and SIGNALS_WAKE in the calling thread, so every later thread —
 *     gguffs', libfuse's and libcurl's — inherits them blocked; ignores
 *     SIGPIPE (a closed pipe is an error return, not a death); starts the
 *     signal thread.  false (and a message) if it cannot.
 *   - signals_attach(se): from now on a signal ends se's loop.
 *   - signals_after_fork(): in the daemon, after fuse_daemonize (threads do
 *     not survive fork): starts the signal thread again.  A signal sent to
 *     the daemon before it runs stays pending and is taken then.  false
 *     (and a message) if it cannot: the caller unmounts and exits.
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

bool signals_init(void);
void signals_attach(struct fuse_session *se);
bool signals_after_fork(void);
void signals_loop_enter(void);
void signals_loop_leave(void);
void signals_stop(void);

#endif
