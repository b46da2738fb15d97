/* fuzz_llmtap.c - what an LLM server sends back through batchgate
 * (gateway/llmtap.c): any bytes as an event stream, cut into pieces.
 *
 * Input layout: byte 0 bit 0: the client asked for the usage event; bits
 * 1-7 and byte 1: the piece size (1 to 32768); the rest is the stream.
 *
 * Beyond "no crash, no leak": the output is the input with whole usage
 * events left out, so it is never longer, and it is exactly the input when
 * the client asked for usage; the same stream fed whole gives the same
 * output and the same counts. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "gateway/llmtap.h"

static void feed(const uint8_t *d, size_t n, size_t piece, bool usage, struct llmtap *t,
                 struct buf *out)
{
    llmtap_init(t);
    t->want_usage = usage;
    for (size_t at = 0; at < n; at += piece)
        if (llmtap_feed(t, (const char *)d + at, n - at < piece ? n - at : piece, (int64_t)at,
                        out) < 0)
            abort();
    llmtap_end(t, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    bool usage = data[0] & 1;
    size_t piece = ((size_t)(data[0] >> 1) << 8 | data[1]) % 32768 + 1;
    data += 2;
    size -= 2;
    struct llmtap a, b;
    struct buf oa = {0}, ob = {0};
    feed(data, size, piece, usage, &a, &oa);
    feed(data, size, size ? size : 1, usage, &b, &ob);
    if (oa.len > size || (usage && (oa.len != size || (size && memcmp(oa.data, data, size)))))
        abort();
    if (oa.len != ob.len || (oa.len && memcmp(oa.data, ob.data, oa.len)) ||
        a.chunks != b.chunks || a.usage_seen != b.usage_seen ||
        a.prompt_tokens != b.prompt_tokens || a.completion_tokens != b.completion_tokens)
        abort();
    llmtap_free(&a);
    llmtap_free(&b);
    buf_free(&oa);
    buf_free(&ob);
    return 0;
}
