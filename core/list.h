/*
 * core/list.h — an intrusive circular doubly-linked list.
 *
 * A list is a head (struct glist) that links to itself when empty; an
 * element embeds a struct glist and is found back with GLIST_ENTRY.  No
 * allocation, no locking: the owner of a list says which lock guards it.
 */
#ifndef CORE_LIST_H
#define CORE_LIST_H

#include <stddef.h>

struct glist {
    struct glist *prev, *next;
};

#define GLIST_ENTRY(link, type, member) \
    ((type *)(void *)((char *)(link) - offsetof(type, member)))

static inline void glist_init(struct glist *head)
{
    head->prev = head->next = head;
}

static inline int glist_empty(const struct glist *head)
{
    return head->next == head;
}

/* Adds e at the front of the list of head. */
static inline void glist_add(struct glist *head, struct glist *e)
{
    e->next = head->next;
    e->prev = head;
    head->next->prev = e;
    head->next = e;
}

/* Takes e off its list (and leaves it linked to itself). */
static inline void glist_del(struct glist *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}

#endif
