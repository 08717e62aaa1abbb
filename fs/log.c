/* fs/log.c — where messages go (see log.h). */
#include "fs.h"
#include "log.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <paths.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define KINDS 64

static struct {
    pthread_mutex_t mu;
    char *mountpoint;
    int fd;                     /* -o log_file, or -1 */
    bool daemon;                /* stderr is /dev/null */
    bool syslog;
    /* the log file's lines (ggfs_log_keep): a ring of the last LOG_KEEP,
     * ring[(head + i) % LOG_KEEP] the i-th oldest of n; bytes in all */
    bool keep;
    char *ring[LOG_KEEP];
    size_t ring_len[LOG_KEEP];
    unsigned head, n;
    size_t bytes;
    /* rate limiting: per format string */
    struct log_kind {
        const char *fmt;
        long sec;               /* the second counted (CLOCK_MONOTONIC) */
        unsigned n;             /* messages in it */
        unsigned long suppressed;
    } kinds[KINDS];
} lg = { .mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

/* Keeps "STAMP body\n" as the newest line of the ring, the oldest
 * dropped once it holds LOG_KEEP; under lg.mu.  Out of memory: not kept. */
static void keep_line(const char *stamp, const char *body)
{
    char line[LOG_LINE_MAX];
    int n = snprintf(line, sizeof line, "%s %s\n", stamp, body);
    if (n < 0)
        return;
    if (n >= (int)sizeof line) {
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    /* one message, one line */
    for (int i = 0; i < n - 1; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    char *copy = malloc((size_t)n);
    if (!copy)
        return;
    memcpy(copy, line, (size_t)n);
    unsigned slot;
    if (lg.n == LOG_KEEP) {
        slot = lg.head;
        lg.bytes -= lg.ring_len[slot];
        free(lg.ring[slot]);
        lg.head = (lg.head + 1) % LOG_KEEP;
    } else {
        slot = (lg.head + lg.n++) % LOG_KEEP;
    }
    lg.ring[slot] = copy;
    lg.ring_len[slot] = (size_t)n;
    lg.bytes += (size_t)n;
}

/* One line out, under lg.mu; text without its final newline. */
static void emit(enum fuse_log_level level, const char *text)
{
    /* the line as written ("gguffs: MODEL: ..."); syslog and the files
     * name the mount point instead of the program (the log file at the
     * mount's root needs neither) */
    const char *body = strncmp(text, "gguffs: ", 8) == 0 ? text + 8 : text;
    if (!lg.daemon)
        fprintf(stderr, "%s\n", text);
    char stamp[32] = "";
    if (lg.fd >= 0 || lg.keep) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    if (lg.keep)
        keep_line(stamp, body);
    if (lg.fd >= 0) {
        char line[LOG_LINE_MAX];
        int n = snprintf(line, sizeof line, "%s gguffs[%d]: %s: %s\n", stamp, (int)getpid(),
                         lg.mountpoint ? lg.mountpoint : "?", body);
        if (n >= (int)sizeof line) {
            n = sizeof line - 1;
            line[n - 1] = '\n';
        }
        /* one write: O_APPEND keeps lines whole among writers */
        if (n > 0 && write(lg.fd, line, (size_t)n) < 0) {
            /* nowhere left to say it */
        }
    } else if (lg.syslog) {
        syslog((int)level, "%s: %s", lg.mountpoint ? lg.mountpoint : "?", body);
    }
}

static void say_suppressed(struct log_kind *k)
{
    if (!k->suppressed)
        return;
    char line[160];
    snprintf(line, sizeof line, "gguffs: %lu more message%s like the last one suppressed",
             k->suppressed, k->suppressed == 1 ? "" : "s");
    k->suppressed = 0;
    emit(FUSE_LOG_WARNING, line);
}

static void handler(enum fuse_log_level level, const char *fmt, va_list ap)
{
    char text[LOG_LINE_MAX];
    vsnprintf(text, sizeof text, fmt, ap);
    size_t len = strlen(text);
    while (len && text[len - 1] == '\n')
        text[--len] = '\0';
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&lg.mu);
    /* the kind: this format, else a free slot, else the last one (shared) */
    struct log_kind *k = NULL;
    for (unsigned i = 0; i < KINDS && !k; i++)
        if (lg.kinds[i].fmt == fmt || !lg.kinds[i].fmt || i == KINDS - 1)
            k = &lg.kinds[i];
    if (k->fmt != fmt && k->fmt) {
        say_suppressed(k);
        k->n = 0;
    }
    k->fmt = fmt;
    if (k->sec != ts.tv_sec) {
        say_suppressed(k);
        k->sec = ts.tv_sec;
        k->n = 0;
    }
    if (k->n < LOG_BURST) {
        k->n++;
        emit(level, text);
    } else {
        k->suppressed++;
    }
    pthread_mutex_unlock(&lg.mu);
}

/* core/'s messages (core/log.h): the same handler, at syslog's levels,
 * which are fuse_log's */
_Static_assert(FUSE_LOG_ERR == LOG_ERR && FUSE_LOG_INFO == LOG_INFO &&
               FUSE_LOG_WARNING == LOG_WARNING, "fuse_log's levels are syslog's");
static void core_handler(int level, const char *fmt, va_list ap)
{
    handler((enum fuse_log_level)level, fmt, ap);
}

bool ggfs_log_open(const char *mountpoint, const char *log_file)
{
    lg.mountpoint = mountpoint ? strdup(mountpoint) : NULL;
    if (log_file) {
        lg.fd = open(log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0600);
        if (lg.fd < 0) {
            fprintf(stderr, "gguffs: log_file=%s: %s\n", log_file, strerror(errno));
            return false;
        }
    }
    fuse_set_log_func(handler);
    core_log_set(core_handler);
    return true;
}

void ggfs_log_keep(void)
{
    pthread_mutex_lock(&lg.mu);
    lg.keep = true;
    pthread_mutex_unlock(&lg.mu);
}

void ggfs_log_say_where(void)
{
    /* glibc's syslog() writes to this socket; without it (no syslog daemon)
     * every message would be lost */
    struct stat st;
    if (lg.fd >= 0 || (stat(_PATH_LOG, &st) == 0 && S_ISSOCK(st.st_mode)))
        return;
    /* "/dev/fd/N": mount.fuse3 made the mount (drop_privileges), whose
     * path gguffs does not know */
    const char *mp = lg.mountpoint && strncmp(lg.mountpoint, "/dev/fd/", 8) != 0 ?
                     lg.mountpoint : "MOUNTPOINT";
    fprintf(stderr, "gguffs: no syslog here (%s does not exist): messages go to %s/log (the "
            "last %d), or to a file with -o log_file=FILE\n", _PATH_LOG, mp, LOG_KEEP);
}

size_t ggfs_log_size(void)
{
    pthread_mutex_lock(&lg.mu);
    size_t b = lg.bytes;
    pthread_mutex_unlock(&lg.mu);
    return b;
}

char *ggfs_log_copy(size_t *len)
{
    pthread_mutex_lock(&lg.mu);
    char *p = malloc(lg.bytes ? lg.bytes : 1);
    size_t at = 0;
    for (unsigned i = 0; p && i < lg.n; i++) {
        unsigned slot = (lg.head + i) % LOG_KEEP;
        memcpy(p + at, lg.ring[slot], lg.ring_len[slot]);
        at += lg.ring_len[slot];
    }
    pthread_mutex_unlock(&lg.mu);
    *len = at;
    return p;
}

void ggfs_log_daemonized(void)
{
    pthread_mutex_lock(&lg.mu);
    lg.daemon = true;
    if (lg.fd < 0) {
        openlog("gguffs", LOG_PID, LOG_USER);
        lg.syslog = true;
    }
    pthread_mutex_unlock(&lg.mu);
}

void ggfs_log_close(void)
{
    pthread_mutex_lock(&lg.mu);
    for (unsigned i = 0; i < KINDS; i++)
        say_suppressed(&lg.kinds[i]);
    if (lg.fd >= 0)
        close(lg.fd);
    lg.fd = -1;
    if (lg.syslog)
        closelog();
    lg.syslog = false;
    free(lg.mountpoint);
    lg.mountpoint = NULL;
    lg.keep = false;
    for (unsigned i = 0; i < lg.n; i++)
        free(lg.ring[(lg.head + i) % LOG_KEEP]);
    lg.n = lg.head = 0;
    lg.bytes = 0;
    pthread_mutex_unlock(&lg.mu);
    fuse_set_log_func(NULL);
    core_log_set(NULL);
}
