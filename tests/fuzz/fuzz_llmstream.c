/* fuzz_llmstream.c - a Batch API line's streamed answer assembled whole
 * (serving/llmstream.c): any bytes as the server's event stream.
 *
 * Input layout: byte 0 bit 0: a chat completion (else a text one); the rest
 * is the stream. Beyond "no crash, no leak": a stream that assembles gives
 * one JSON object with a choices array, and nothing is written on failure.
 * Replayed by tests/oom (test_oom_llmstream) with each of the assembler's
 * own allocations failing in turn; jansson's are spared there, since its
 * lexer cannot take a failed one (tests/oom/failalloc.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "common/buf.h"
#include "serving/llmstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* tests/oom/failalloc.c, when the harness is linked there. */
__attribute__((weak)) void failalloc_spare_jansson(int spare);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool chat = data[0] & 1;
    if (failalloc_spare_jansson)
        failalloc_spare_jansson(1);
    struct buf out = BUF_INIT;
    struct error err = {0};
    int rc = llmstream_assemble((const char *)data + 1, size - 1, chat, &out, &err);
    if (rc < 0) {
        if (out.len)
            abort();
    } else {
        json_t *o = json_loadb(out.data, out.len, 0, NULL);
        if (!json_is_object(o) || !json_is_array(json_object_get(o, "choices")))
            abort();
        json_decref(o);
    }
    buf_free(&out);
    if (failalloc_spare_jansson)
        failalloc_spare_jansson(0);
    return 0;
}
