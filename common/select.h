/* select.h - the k-th smallest element of an array, in expected linear
 * time (Hoare's selection, the middle of three as pivot), for the robust
 * fits that want a median or a quantile, not the order of a whole array:
 * the latency model's Theil-Sen medians (batcher/latmodel.c, doubles) and
 * the answer guard's quantiles (batcher/guard.c, int64_t).
 *
 * SELECT_KTH_DEFINE(name, type) defines
 *     static type name(type *v, int n, int k);
 * which returns the k-th smallest (0-based) of v[0..n), 0 <= k < n, and
 * leaves v reordered so that v[k] holds it, everything before it is <= and
 * everything after >=. One body for every element type, which C has no
 * other way to share without a callback per comparison (qsort's, what the
 * fits cost before). */
#ifndef BG_SELECT_H
#define BG_SELECT_H

#define SELECT_KTH_DEFINE(name, type)                                                       \
    static type name(type *v, int n, int k)                                                 \
    {                                                                                       \
        int lo = 0, hi = n - 1;                                                             \
        while (hi > lo) {                                                                   \
            type x = v[lo], y = v[lo + (hi - lo) / 2], z = v[hi];                           \
            type p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y)); \
            int i = lo, j = hi;                                                             \
            while (i <= j) {                                                                \
                while (v[i] < p)                                                            \
                    i++;                                                                    \
                while (v[j] > p)                                                            \
                    j--;                                                                    \
                if (i <= j) {                                                               \
                    type t = v[i];                                                          \
                    v[i++] = v[j];                                                          \
                    v[j--] = t;                                                             \
                }                                                                           \
            }                                                                               \
            if (k <= j)                                                                     \
                hi = j;                                                                     \
            else if (k >= i)                                                                \
                lo = i;                                                                     \
            else                                                                            \
                break; /* between the halves: equal to the pivot, in place */             \
        }                                                                                   \
        return v[k];                                                                        \
    }

#endif
