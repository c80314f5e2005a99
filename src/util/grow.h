/*
** Growing a heap array: the one resizing policy every aggregate uses.
*/
#ifndef LP_GROW_H
#define LP_GROW_H

#include <stddef.h>

/*
** Makes *arr (of *cap elements of elsize bytes) hold at least `need` elements, doubling
** the capacity; returns 0, or -ENOMEM with *arr and *cap untouched.
*/
int lp_grow(void **arr, size_t *cap, size_t need, size_t elsize);

#endif
