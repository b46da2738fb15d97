/* memguard.c - see memguard.h. */
#include "common/memguard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* The guarded copy of this thread, if one is under way. */
static _Thread_local sigjmp_buf *volatile memguard_jmp;
static struct sigaction memguard_prev;
static pthread_once_t memguard_once = PTHREAD_ONCE_INIT;

static void memguard_on_sigbus(int sig, siginfo_t *si, void *uc)
{
    sigjmp_buf *j = memguard_jmp;
    if (j)
        siglongjmp(*j, 1);
    if ((memguard_prev.sa_flags & SA_SIGINFO) && memguard_prev.sa_sigaction) {
        memguard_prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(memguard_prev.sa_flags & SA_SIGINFO) && memguard_prev.sa_handler != SIG_DFL &&
        memguard_prev.sa_handler != SIG_IGN) {
        memguard_prev.sa_handler(sig);
        return;
    }
    /* The default action: the faulting access runs again on return and
     * the process dies of it, as it would have without this handler. */
    signal(SIGBUS, SIG_DFL);
}

static void memguard_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = memguard_on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &memguard_prev);
}

int memguard_copy(void *dst, const void *src, size_t n)
{
    pthread_once(&memguard_once, memguard_install);
    sigjmp_buf j;
    if (sigsetjmp(j, 1)) {   /* the mask saved: SIGBUS is unblocked again after the jump */
        memguard_jmp = NULL;
        return -1;
    }
    memguard_jmp = &j;
    atomic_signal_fence(memory_order_seq_cst);   /* the copy stays inside the guard */
    memcpy(dst, src, n);
    atomic_signal_fence(memory_order_seq_cst);
    memguard_jmp = NULL;
    return 0;
}
