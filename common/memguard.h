/* memguard.h - a copy that survives a page its mapping no longer has.
 *
 * A file or shared memory object truncated under a mapping turns every
 * access past its new end into SIGBUS, which kills the process. A client
 * owns the objects of the shared memory regions it registers, and may
 * shrink one after registering it: one request would take the gateway
 * down, every other request with it. Copies to and from such mappings go
 * through memguard_copy: a SIGBUS inside it fails that copy alone.
 *
 * The SIGBUS handler is installed once, process-wide (a signal's handler
 * can be nothing else); it acts only inside a guarded copy on the thread
 * that faulted, and leaves every other SIGBUS to the handler that was
 * there before it (by default: the process dies, as it would have). */
#ifndef BG_MEMGUARD_H
#define BG_MEMGUARD_H

#include <stddef.h>

/* memcpy(dst, src, n): 0, or -1 when a page of src or dst was gone
 * (SIGBUS); dst may then hold part of the bytes. */
int memguard_copy(void *dst, const void *src, size_t n);

#endif
