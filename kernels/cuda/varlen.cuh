/* varlen.cuh - the host-side check of a packed batch's offsets, shared by
 * attention.cu and pool.cu before they launch: the same rules as the CPU
 * kernels (cu_seqlens[0] >= 0, non-decreasing), read from the host copy of
 * the offsets, since a kernel cannot report a bad one and must not be sized
 * from one. */
#ifndef BG_CUDA_VARLEN_CUH
#define BG_CUDA_VARLEN_CUH

#include <stdio.h>

/* The longest of the nseq sequences of cu (host, nseq + 1 offsets), or -1
 * with a reason in msg (who names the caller). */
static inline int varlen_longest(const int *cu, int nseq, const char *who, char *msg, size_t cap)
{
    if (!cu || nseq < 0 || cu[0] < 0) {
        snprintf(msg, cap, "%s: no offsets, a negative count or a negative first offset", who);
        return -1;
    }
    int longest = 0;
    for (int s = 0; s < nseq; s++) {
        if (cu[s + 1] < cu[s]) {
            snprintf(msg, cap, "%s: offsets decrease at sequence %d (%d then %d)", who, s, cu[s],
                     cu[s + 1]);
            return -1;
        }
        const int len = cu[s + 1] - cu[s];
        longest = len > longest ? len : longest;
    }
    return longest;
}

#endif
