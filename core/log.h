/*
 * core/log.h — how core/ says what the caller should hear (log.c): one
 * line per message, at a syslog level (LOG_ERR, LOG_INFO, ...), handed to
 * the function the program set; without one, written to stderr.  fs/
 * sets its log's handler (fs/log.c), so core/'s lines go where the
 * mount's go, rate-limited by their format as those are.
 *
 * Locks: none; the function is an atomic pointer, set before the threads
 * that log run and reset after them.
 */
#ifndef CORE_LOG_H
#define CORE_LOG_H

#include <stdarg.h>
#include <syslog.h>

typedef void core_log_fn(int level, const char *fmt, va_list ap);

/* fn receives every message from now on (NULL: stderr). */
void core_log_set(core_log_fn *fn);
void core_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
