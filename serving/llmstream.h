/* llmstream.h - a streamed OpenAI completion assembled into the answer the
 * same call would have had whole (docs/LLM.md "Batch API": lines sent
 * streamed so that a preempted one stops on the server at once; a server
 * that is not streaming notices a closed connection only when it has
 * finished, llama-server among them).
 *
 * The input is the whole event stream as the server sent it (server-sent
 * events, `data: {chunk}` each, `data: [DONE]` last); the output, a
 * `chat.completion` (chat) or `text_completion` object: id, created, model
 * and system_fingerprint of the first chunk, each choice's role, text
 * (content, or text) and finish_reason, and the usage of the chunk that
 * carried it (ask with stream_options.include_usage). Only what those
 * fields say is assembled: a request for tools or logprobs must be sent
 * whole. */
#ifndef BG_LLMSTREAM_H
#define BG_LLMSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "common/error.h"

#define LLMSTREAM_CHOICES_MAX 128   /* choice indexes 0..127 (the `n` of a request) */

/* Appends the whole answer's JSON to out. Fails (BG_EINVAL, err naming
 * why) when the stream is not one: an event that is not JSON, an `error`
 * event (its message), a choice index out of range, no choice at all, or an
 * end before `[DONE]` with a choice not finished. */
int llmstream_assemble(const char *sse, size_t len, bool chat, struct buf *out,
                       struct error *err);

#endif
