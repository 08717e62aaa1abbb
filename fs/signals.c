/*
 * fs/signals.c — the signal thread (signals.h says why it closes the
 * window libfuse's handlers leave, and what each call promises).
 */
#include "signals.h"

#define FUSE_USE_VERSION 312     /* as fs.h */
#include <fuse_lowlevel.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How often the loop's thread is interrupted until its loop returns. */
#define WAKE_EVERY_NS (10 * 1000 * 1000)

static struct {
    pthread_mutex_t mu;        /* guards the fields below */
    struct fuse_session *se;   /* signals_attach: a signal ends its loop */
    pthread_t loop_thread;     /* the thread that runs (or will run) it */
    bool loop_done;            /* signals_loop_leave: nothing left to wake */
    pthread_t th;              /* the signal thread */
    bool running;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void ending_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

static void wake_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGNALS_WAKE);
}

/* SIGNALS_WAKE's handler: nothing; that it ran is what makes the loop's
 * wait return EINTR (installed without SA_RESTART). */
static void on_wake(int sig)
{
    (void)sig;
}

/* Interrupts the loop's thread until the loop has returned.  Cancellation
 * (signals_stop) can come only in nanosleep, with the mutex free. */
static void wake_until_done(void)
{
    struct timespec every = { 0, WAKE_EVERY_NS };
    for (;;) {
        pthread_mutex_lock(&S.mu);
        bool done = S.loop_done;
        if (!done)
            pthread_kill(S.loop_thread, SIGNALS_WAKE);
        pthread_mutex_unlock(&S.mu);
        if (done)
            return;
        nanosleep(&every, NULL);
    }
}

static void *signal_main(void *arg)
{
    (void)arg;
    sigset_t set;
    ending_set(&set);
    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0)
            continue;
        pthread_mutex_lock(&S.mu);
        struct fuse_session *se = S.se;
        if (se)
            fuse_session_exit(se);   /* always: started after signals_attach */
        pthread_mutex_unlock(&S.mu);
        wake_until_done();
    }
    return NULL;
}

static bool start_thread(void)
{
    int e = pthread_create(&S.th, NULL, signal_main, NULL);
    if (e != 0) {
        fprintf(stderr, "gguffs: cannot start the signal thread: %s\n", strerror(e));
        return false;
    }
    S.running = true;
    return true;
}

void signals_init(void)
{
    sigset_t w;
    wake_set(&w);
    pthread_sigmask(SIG_BLOCK, &w, NULL);
    struct sigaction sa = { .sa_handler = on_wake };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGNALS_WAKE, &sa, NULL);
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, NULL);
}

void signals_attach(struct fuse_session *se)
{
    sigset_t set;
    ending_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_mutex_lock(&S.mu);
    S.se = se;
    S.loop_thread = pthread_self();
    pthread_mutex_unlock(&S.mu);
}

bool signals_start(void)
{
    /* the daemon's own thread (the fork's child) runs the loop */
    pthread_mutex_lock(&S.mu);
    S.loop_thread = pthread_self();
    pthread_mutex_unlock(&S.mu);
    return start_thread();
}

void signals_loop_enter(void)
{
    sigset_t w;
    wake_set(&w);
    /* A wake sent already (the signal came before the loop) is taken here,
     * harmlessly; the loop then finds its session ended at its first check. */
    pthread_sigmask(SIG_UNBLOCK, &w, NULL);
}

void signals_loop_leave(void)
{
    sigset_t w;
    wake_set(&w);
    pthread_sigmask(SIG_BLOCK, &w, NULL);
    pthread_mutex_lock(&S.mu);
    S.loop_done = true;
    pthread_mutex_unlock(&S.mu);
}

void signals_stop(void)
{
    if (!S.running)
        return;
    pthread_cancel(S.th);
    pthread_join(S.th, NULL);
    S.running = false;
}
