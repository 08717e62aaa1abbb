/* core/log.c — core/'s messages, to the program's handler (log.h). */
#include "core/log.h"

#include <stdatomic.h>
#include <stdio.h>

static _Atomic(core_log_fn *) handler;

void core_log_set(core_log_fn *fn)
{
    atomic_store(&handler, fn);
}

void core_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_log_fn *fn = atomic_load(&handler);
    if (fn)
        fn(level, fmt, ap);
    else
        vfprintf(stderr, fmt, ap);
    va_end(ap);
}
