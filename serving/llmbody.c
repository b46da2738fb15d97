/* llmbody.c - see llmbody.h. */
#include "serving/llmbody.h"

#include <stdbool.h>
#include <stdio.h>

int llmbody_check(const json_t *root, char *param, size_t pcap, struct error *err)
{
    json_t *v = json_object_get(root, "stream");
    if (v && !json_is_null(v) && !json_is_boolean(v)) {
        snprintf(param, pcap, "stream");
        return error_set(err, BG_EINVAL, "stream: must be true or false");
    }
    /* Each choice is generated: n (and best_of, the completions API's
     * candidates) multiply the tokens a call may take, and the quota's
     * reservation (an n of 16 was reserved as one choice). */
    static const char *const counts[] = {"max_tokens", "max_completion_tokens", "n_predict", "n",
                                         "best_of"};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        v = json_object_get(root, counts[i]);
        if (!v || json_is_null(v))
            continue;
        snprintf(param, pcap, "%s", counts[i]);
        if (!json_is_integer(v))
            return error_set(err, BG_EINVAL, "%s: must be an integer", counts[i]);
        /* A bound no context comes near: the quota's sums of estimates
         * stay far from int64's end (9223372036854775807 wrapped to a
         * negative estimate, admitted past any quota). */
        bool choices = i >= 3;
        long long n = (long long)json_integer_value(v);
        if (choices && n > LLMBODY_CHOICES_MAX)
            return error_set(err, BG_EINVAL, "%s: %lld choices are more than %d", counts[i], n,
                             LLMBODY_CHOICES_MAX);
        if (!choices && n > LLMBODY_TOKENS_MAX)
            return error_set(err, BG_EINVAL, "%s: %lld is more tokens than any model generates "
                             "(at most %d)", counts[i], n, LLMBODY_TOKENS_MAX);
    }
    if (pcap)
        param[0] = '\0';
    return 0;
}
