/* hash.h - FNV-1a, 64 bits, of a C string: for sets of names and ids in
 * memory (a collision costs what the caller says), never for anything a
 * client could choose to collide on purpose with harm. */
#ifndef BG_HASH_H
#define BG_HASH_H

#include <stdint.h>

static inline uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

#endif
