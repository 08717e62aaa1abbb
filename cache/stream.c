/* cache/stream.c — sequential readers and the readahead ramp (see stream.h). */
#include "stream.h"

#include <stddef.h>

bool stream_continues(const struct stream *s, uint64_t first, uint64_t behind, uint64_t gap)
{
    return first + behind >= s->next && first <= s->next + gap;
}

void stream_start(struct stream *s, uint64_t first, uint64_t last, uint64_t end)
{
    s->live = true;
    s->start = first;
    s->next = last + 1;
    s->end = end;
    s->ahead = last + 1;
    s->window = 0;
    s->gen++;
}

void stream_move(struct stream *s, uint64_t last, uint64_t end, unsigned max, uint64_t n_units,
                 uint64_t *from, uint64_t *to)
{
    if (end > s->end) {
        s->end = end;
        s->window = s->window ? (2ull * s->window < max ? 2 * s->window : max) : 1;
    }
    if (s->window > max)
        s->window = max;
    if (last + 1 > s->next)
        s->next = last + 1;
    /* claimed: after the furthest unit read and what was claimed before,
     * up to the window's end */
    *from = s->ahead > s->next ? s->ahead : s->next;
    *to = s->next - 1 + s->window;
    if (*to >= n_units)
        *to = n_units ? n_units - 1 : 0;
    if (!s->window || !n_units || *from > *to) {
        *from = 1;
        *to = 0;
        return;
    }
    s->ahead = *to + 1;
}

void stream_restart(struct stream *s)
{
    s->start = s->next = s->end = s->ahead = 0;
    s->gen++;
}

void stream_unclaim(struct stream *s, uint64_t gen, uint64_t k, uint64_t to)
{
    if (s->gen == gen && s->ahead == to + 1)
        s->ahead = k;
}

bool stream_long(const struct stream *s, uint64_t first, unsigned units)
{
    return first > s->start && first - s->start > units;
}

struct stream *stream_find(struct stream_set *set, uint64_t first, uint64_t last, uint64_t end)
{
    set->tick++;
    struct stream *lru = &set->st[0];
    for (unsigned i = 0; i < STREAM_SET_MAX; i++) {
        struct stream *x = &set->st[i];
        if (x->live && stream_continues(x, first, (uint64_t)x->window + 2, 0)) {
            x->tick = set->tick;
            return x;
        }
        if (!x->live || (lru->live && x->tick < lru->tick))
            lru = x;
    }
    stream_start(lru, first, last, end);
    lru->tick = set->tick;
    return NULL;
}
