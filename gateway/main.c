/* main.c - the batchgate program: CLI, configuration, start and stop order,
 * signals. The only place that calls exit().
 *
 * Signals are blocked in every thread and taken here with sigwaitinfo, so no
 * handler runs in async-signal context: SIGTERM/SIGINT drain, a second one
 * forces, SIGHUP reopens the log, SIGUSR1 means an IO thread exited. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "gateway/api.h"
#include "gateway/shmreg.h"
#include "gateway/admit.h"
#include "gateway/auth.h"
#include "backends/model.h"
#include "common/optname.h"
#include "common/clock.h"
#include "common/cpus.h"
#include "gateway/config.h"
#include "gateway/grpc.h"
#include "common/error.h"
#include "serving/jobs.h"
#include "serving/ledger.h"
#include "gateway/jscratch.h"
#include "gateway/offload.h"
#include "kernels/kernels.h"
#include "common/log.h"
#include "common/schema.h"
#include "common/sha256.h"
#include "gateway/nvml.h"
#include "gateway/procstat.h"
#include "gateway/proxy.h"
#include "gateway/report.h"
#include "gateway/tenantstats.h"
#include "http/http.h"
#include "serving/governance.h"
#include "serving/serving.h"
#include "state/state.h"

#define EXIT_USAGE 2

/* A restart does not give a tenant its day's tokens back: the usage ledger
 * says what the last process counted. A ledger that cannot be read is
 * logged and the day starts from zero (serving matters more). */
static bool main_is_pool(const char *model, void *arg) { return serving_is_pool(arg, model); }

static void main_restore_quotas(struct admit *a, const struct tenants_config *tc,
                                struct state *st, struct serving *s)
{
    struct error err = {0};
    int64_t unix_s = time(NULL);
    int rows = admit_restore_ledger(a, tc, st, main_is_pool, s, now_ns(), unix_s, &err);
    if (rows < 0) {
        log_error("token quotas: today's usage could not be read from the ledger, so they "
                  "count from zero: %s", err.msg);
        return;
    }
    for (int i = 0; rows > 0 && i < tc->n; i++) {
        int64_t minute, used;
        admit_tokens_used(a, i, now_ns(), unix_s, &minute, &used);
        if (used > 0)
            log_info("tenant \"%s\": %lld tokens used today before this start count toward its "
                     "token quotas", tc->t[i].name, (long long)used);
    }
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: batchgate [--config FILE] [--models DIR] [--listen HOST:PORT]\n"
            "                 [--grpc-listen HOST:PORT|off] [--io-threads N]\n"
            "                 [--log-level debug|info|warn|error]\n"
            "       batchgate hash-key KEY|-\n"
            "       batchgate report [--config FILE] [--from T] [--to T] [--by tenant|model]\n"
            "                        [--format table|csv|json]\n"
            "\n"
            "A batching inference gateway speaking the KServe v2 / Triton HTTP protocol.\n"
            "\n"
            "  -c, --config FILE      JSON configuration (see docs/CONFIG.md)\n"
            "  -m, --models DIR       model repository (default: models)\n"
            "  -l, --listen HOST:PORT address to serve on (default: 127.0.0.1:8000;\n"
            "                         port 0 picks a free port, logged at start)\n"
            "      --grpc-listen HOST:PORT|off\n"
            "                         the KServe v2 gRPC port (default: 127.0.0.1:8001)\n"
            "  -t, --io-threads N     IO threads (default: 0 = one per CPU it may use)\n"
            "      --log-level LEVEL  debug, info, warn or error (default: info)\n"
            "  -h, --help             this text\n"
            "  -V, --version          print the version\n"
            "      --config-fields server|model\n"
            "                         print the field table of docs/CONFIG.md or docs/MODELS.md\n"
            "\n"
            "Flags override the config file. Exit status: 0 clean stop, 1 runtime failure,\n"
            "2 bad usage or bad configuration.\n"
            "\n"
            "hash-key prints the \"sha256:<hex>\" form of an API key for a tenant's \"keys\"\n"
            "in the config; with - it reads the key from stdin (out of the shell's history).\n"
            "\n"
            "report prints the usage ledger for a period (batchgate report --help).\n");
}

/* An API key travels in a header: visible ASCII, no spaces. Longer than
 * this it would not fit the default max_header_bytes with the rest. */
#define HASH_KEY_MAX 4096

/* `batchgate hash-key KEY|-`: exit 0 with the digest on stdout, or 2. */
static int main_hash_key(int argc, char **argv)
{
    if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
        printf("usage: batchgate hash-key KEY (or - to read it from stdin): prints the "
               "\"sha256:<hex>\" form of an API key for a tenant's \"keys\"\n");
        return 0;   /* it printed the digest of "--help" */
    }
    if (argc != 3) {
        fprintf(stderr, "batchgate: usage: batchgate hash-key KEY (or - to read it from stdin)\n");
        return EXIT_USAGE;
    }
    char key[HASH_KEY_MAX + 2];
    size_t len;
    if (strcmp(argv[2], "-") == 0) {
        len = fread(key, 1, sizeof key - 1, stdin);
        key[len] = '\0';
        /* One line, as `echo` or a password manager gives it. */
        while (len > 0 && (key[len - 1] == '\n' || key[len - 1] == '\r'))
            key[--len] = '\0';
    } else {
        len = strlen(argv[2]);
        if (len <= HASH_KEY_MAX)
            memcpy(key, argv[2], len + 1);
    }
    if (len == 0 || len > HASH_KEY_MAX) {
        fprintf(stderr, "batchgate: hash-key: the key must be 1 to %d characters long\n",
                HASH_KEY_MAX);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] >= 0x7f) {
            /* Where, not what: the key is a secret. */
            fprintf(stderr, "batchgate: hash-key: character %zu of the key is a space, a control "
                            "character or not ASCII; a key is sent in a header "
                            "(Authorization: Bearer KEY) and must be visible ASCII\n", i + 1);
            return EXIT_USAGE;
        }
    uint8_t d[SHA256_DIGEST_LEN];
    char hex[2 * SHA256_DIGEST_LEN + 1];
    sha256(key, len, d);
    sha256_hex(d, hex);
    printf("sha256:%s\n", hex);
    explicit_bzero(key, sizeof key);
    return 0;
}

/* How often the main thread returns free heap memory to the kernel. */
#define MAIN_TRIM_INTERVAL_S 10
/* What a stop gives the lifecycle thread past its deadline: its own exit
 * when idle takes a wake-up, which is no hung load. */
#define MAIN_STOP_GRACE_NS (100 * 1000000LL)
/* Reads of the state database waiting for the offload thread before more
 * are refused 503 (each holds its parsed question only). */
#define MAIN_OFFLOAD_QUEUED 64
/* Each IO thread's body-decoding arena keeps this much between requests:
 * a request of a few hundred numbers decodes without a malloc. */
#define JSCRATCH_BLOCK (64 * 1024)

struct cli {
    const char *config_path;
    const char *models;
    const char *listen;
    const char *grpc_listen;
    const char *io_threads;
    const char *log_level;
};

/* What --help, --version and --config-fields print; they answer only once the
 * whole command line parsed, so "batchgate -V extra" is bad usage, not a version. */
static void cli_answer(int what, const char *fields)
{
    if (what == 'h') {
        usage(stdout);
    } else if (what == 'V') {
        char cuda[256];
        kernels_cuda_devices(cuda, sizeof cuda);
        printf("batchgate %s\ncuda: %s; %s\n", BATCHGATE_VERSION,
               kernels_cuda_built() ? "kernels built" : "not built", cuda);
    } else {
        schema_doc(stdout, fields[0] == 's' ? config_schema() : model_config_schema());
    }
}

/* Returns 0 to continue, 1 when --help/--version already answered, -1 on bad usage. */
static int cli_parse(int argc, char **argv, struct cli *cli)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},   {"models", required_argument, NULL, 'm'},
        {"listen", required_argument, NULL, 'l'},   {"io-threads", required_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'L'}, {"help", no_argument, NULL, 'h'},
        {"grpc-listen", required_argument, NULL, 'g'},
        {"version", no_argument, NULL, 'V'},
        /* The field table of docs/CONFIG.md ("server") or of docs/MODELS.md
         * ("model") from the schema; a test compares them. */
        {"config-fields", required_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    int ch, answer = 0;
    const char *fields = NULL;
    char opt[8];
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":c:m:l:t:hV", opts, NULL)) != -1) {
        const char *took = optname_took_option(argv);
        if (took) {
            fprintf(stderr, "batchgate: %s needs a value (\"%s\" is the next option)\n", took,
                    optarg);
            return -1;
        }
        switch (ch) {
        case 'c':
            /* The last one silently won: a first file, even invalid, was
             * never read (helper's config audit). */
            if (cli->config_path) {
                fprintf(stderr, "batchgate: --config given twice (\"%s\", \"%s\"): give one "
                        "file\n", cli->config_path, optarg);
                return -1;
            }
            cli->config_path = optarg;
            break;
        case 'm': cli->models = optarg; break;
        case 'l': cli->listen = optarg; break;
        case 'g': cli->grpc_listen = optarg; break;
        case 't': cli->io_threads = optarg; break;
        case 'L': cli->log_level = optarg; break;
        case 'h':
        case 'V':
            if (!answer)
                answer = ch;
            break;
        case 'F':
            if (strcmp(optarg, "server") != 0 && strcmp(optarg, "model") != 0) {
                fprintf(stderr, "batchgate: --config-fields: \"%s\" is not server or model\n",
                        optarg);
                return -1;
            }
            if (!answer) {
                answer = 'F';
                fields = optarg;
            }
            break;
        case ':':
            fprintf(stderr, "batchgate: %s needs a value\n",
                    optname_refused(argv, opt, sizeof opt));
            return -1;
        default:
            fprintf(stderr, "batchgate: unknown option %s\n",
                    optname_refused(argv, opt, sizeof opt));
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "batchgate: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    if (answer) {
        cli_answer(answer, fields);
        return 1;
    }
    return 0;
}

/* The bundled model repository when none was named and ./models is not
 * there (SPEC.md: "models/ in the source tree, or the installed copy"),
 * found from the executable: installed, PREFIX/bin/batchgate beside
 * PREFIX/share/batchgate/models (CMake's install); built, REPO/build/batchgate
 * beside REPO/models. Left as it is when neither exists. */
static void main_bundled_models(struct config *cfg)
{
    struct stat sb;
    if (cfg->model_repository_set || (stat(cfg->model_repository, &sb) == 0))
        return;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return;
    *slash = '\0';   /* the executable's folder */
    static const char *const rel[] = {"/../share/batchgate/models", "/../models"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char path[PATH_MAX + 64], real[PATH_MAX];
        snprintf(path, sizeof path, "%s%s", exe, rel[i]);
        if (realpath(path, real) && stat(real, &sb) == 0 && S_ISDIR(sb.st_mode) &&
            strlen(real) < sizeof cfg->model_repository) {
            snprintf(cfg->model_repository, sizeof cfg->model_repository, "%s", real);
            return;
        }
    }
}

/* Config file first, then flags on top. *file: the file as read (NULL:
 * none), for SIGHUP to say which of its sections it does not apply. */
static int config_build(const struct cli *cli, struct config *cfg, json_t **file,
                        struct error *err)
{
    config_defaults(cfg);
    int rc;
    *file = NULL;
    if (cli->config_path && (rc = config_load_file_keep(cfg, cli->config_path, file, err)))
        return rc;
    if (cli->models) {
        if (!cli->models[0] || strlen(cli->models) >= sizeof cfg->model_repository)
            return error_set(err, BG_ECONFIG, "--models: must be a directory path");
        snprintf(cfg->model_repository, sizeof cfg->model_repository, "%s", cli->models);
        cfg->model_repository_set = true;
    }
    if (cli->listen && (rc = config_set_listen(cfg, cli->listen, "--listen", err)))
        return rc;
    if (cli->grpc_listen &&
        (rc = config_set_grpc_listen(cfg, cli->grpc_listen, "--grpc-listen", err)))
        return rc;
    if (cli->io_threads) {
        char *end;
        errno = 0;
        long n = strtol(cli->io_threads, &end, 10);
        /* Digits only: strtol also takes " 5" and "+5". */
        if (cli->io_threads[strspn(cli->io_threads, "0123456789")] || !cli->io_threads[0] ||
            *end || errno || n < 0 || n > 1024)
            return error_set(err, BG_ECONFIG, "--io-threads: \"%s\" must be an integer 0..1024",
                             cli->io_threads);
        cfg->http.io_threads = (int)n;
    }
    if (cli->log_level && log_level_parse(cli->log_level, &cfg->log_level) < 0)
        return error_set(err, BG_ECONFIG,
                         "--log-level: \"%s\" must be one of debug, info, warn, error",
                         cli->log_level);
    main_bundled_models(cfg);
    return 0;
}

/* The governor's apply: the shares in force on every device. */
static void main_apply_shares(void *arg, const double *share, double offline_share,
                              const char *window)
{
    (void)window;
    serving_apply_shares(arg, share, offline_share);
}

/* The ledger's energy counter of a device: NVML's for a GPU ("cuda<N>" is
 * NVML's device N: the two agree when CUDA_DEVICE_ORDER=PCI_BUS_ID and no
 * CUDA_VISIBLE_DEVICES remaps them; docs/USAGE.md); none for the rest. */
static int main_energy(void *arg, const char *device, double *joules)
{
    int index;
    char tail;
    if (!arg || sscanf(device, "cuda%d%c", &index, &tail) != 1)
        return -1;
    return nvml_device_energy(arg, index, joules);
}

/* What the keys in force leave closed to every caller, said at start and
 * after SIGHUP changes the keys. */
static void main_auth_warnings(const struct config *cfg, const struct auth *auth)
{
    if (cfg->tenants.auth_required && !auth_keys_exist(auth))
        log_warn("auth.required is true and no tenant has keys: every request but the health "
                 "routes, /metrics and the dashboard is refused with 401");
    bool any_admin = false;
    for (int i = 0; i < cfg->tenants.n; i++)
        any_admin |= cfg->tenants.t[i].admin;
    if (auth_keys_exist(auth) && !any_admin)
        log_warn("keys are configured and no tenant is an admin (\"admin\": true): the admin "
                 "routes (/v2/repository, PUT /v2/governance, /v2/logging, shared memory, "
                 "/debug) answer 403 to every caller");
}

/* Whether two tenants' settings but their keys are the same, field by
 * field (what the server took at start against what the file says now). */
static bool main_tenant_same(const struct tenant_config *a, const struct tenant_config *b)
{
    if (strcmp(a->name, b->name) || a->nmodels != b->nmodels ||
        a->share != b->share || a->limit != b->limit || a->lend != b->lend ||
        a->max_inflight != b->max_inflight || a->rate_rows_per_s != b->rate_rows_per_s ||
        a->tokens_per_minute != b->tokens_per_minute || a->tokens_per_day != b->tokens_per_day ||
        a->batch_tokens_per_day != b->batch_tokens_per_day ||
        a->llm_priority != b->llm_priority || a->admin != b->admin)
        return false;
    for (int k = 0; k < a->nmodels; k++)
        if (strcmp(a->models[k], b->models[k]))
            return false;
    return true;
}

/* The sections of the file that SIGHUP does not apply and that differ
 * from the file as read at start, named in `out` ("limits, listen"); the
 * JSON compared whole, so that no setting is missed. */
static void main_changed_sections(const json_t *at_start, const json_t *now, char *out,
                                  size_t cap)
{
    static const char *const handled[] = {"governance", "tenants", "auth"};
    out[0] = '\0';
    const json_t *sides[2] = {at_start, now};
    for (int k = 0; k < 2; k++) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)sides[k], key, v) {
            bool skip = false;
            for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++)
                skip |= strcmp(key, handled[i]) == 0;
            if (skip || (k == 1 && json_object_get(at_start, key)) ||
                json_equal(json_object_get(at_start, key), json_object_get(now, key)))
                continue;
            size_t n = strlen(out);
            snprintf(out + n, cap - n, "%s%s", n ? ", " : "", key);
        }
    }
}

/* Stops what runs work before the IO threads go (their answers need the
 * threads' mailboxes); false when a model load runs on past deadline_ns
 * (now_ns's clock; 0: waited for however long). The lifecycle first: a job
 * waiting on a load that does not end is answered then (the job stays for
 * the next start), so the jobs runner can stop. The jobs runner takes its
 * lines back before the batchers close (a line the batcher refused would
 * otherwise look answered), and answers its last commands meanwhile. */
static bool main_stop_work(struct api_state *api, struct serving *serving, int64_t deadline_ns)
{
    bool loads_done = !serving || lifecycle_stop(serving, deadline_ns);
    jobs_stop(api->jobs);
    offload_stop(api->offload);
    return serving_stop(serving, deadline_ns) && loads_done;
}

static void main_reopen_log(struct log *log, const struct config *cfg);

/* The drain is over and a model load may still run (a stop during the
 * start's eager loads, a load asked for just before): waited for until
 * `until`, or, at a second SIGTERM or SIGINT, a moment only. The wait
 * took no signal: Ctrl-C twice did nothing for up to
 * shutdown_timeout_ms. Returns the deadline left for the stop. */
static int64_t main_wait_loads(struct serving *serving, const sigset_t *sigs, int64_t until,
                               struct log *log, const struct config *cfg)
{
    for (;;) {
        int64_t now = now_ns();
        int64_t slice = now + 50 * 1000000LL;
        if (lifecycle_stop(serving, slice < until ? slice : until) || now_ns() >= until)
            return until;
        siginfo_t si;
        struct timespec zero = {0, 0};
        int got = sigtimedwait(sigs, &si, &zero);
        if (got == SIGHUP)
            main_reopen_log(log, cfg);
        if (got == SIGTERM || got == SIGINT) {
            log_warn("SIG%s again: not waiting for the model load under way", sigabbrev_np(got));
            return now_ns() + MAIN_STOP_GRACE_NS;
        }
    }
}

/* SIGHUP's reopen of the log file (logrotate moved it). */
static void main_reopen_log(struct log *log, const struct config *cfg)
{
    int r = log_reopen(log);
    if (r == 0) {
        log_info("SIGHUP: log reopened");
        return;
    }
    /* The log still writes to the old file, likely moved or removed by the
     * rotation that sent the signal: said there alone, nobody would read it. */
    log_error("SIGHUP: cannot reopen %s: %s", cfg->log_file, strerror(-r));
    fprintf(stderr, "batchgate: SIGHUP: cannot reopen the log file %s: %s; the log goes on "
            "into the file it had open\n", cfg->log_file, strerror(-r));
}

static void main_reload(const struct cli *cli, const struct config *cfg, struct governor *gov,
                        struct auth *auth, const json_t *file_at_start);

/* Until the start's eager loads are over (serving_start): 0, or the stop
 * signal that came first (SIGTERM, SIGINT; SIGUSR1 when no IO thread runs).
 * A SIGHUP meanwhile does what it does after (it reopened the log alone,
 * and the governance edit it was sent for was lost). */
static int main_wait_started(struct serving *serving, const sigset_t *sigs, struct server *srv,
                             struct log *log, const struct cli *cli, const struct config *cfg,
                             struct governor *gov, struct auth *auth,
                             const json_t *file_at_start)
{
    while (!serving_started(serving)) {
        struct timespec tick = {0, 20 * 1000000};
        siginfo_t si;
        int got = sigtimedwait(sigs, &si, &tick);
        if (got == SIGHUP) {
            main_reopen_log(log, cfg);
            main_reload(cli, cfg, gov, auth, file_at_start);
        } else if (got == SIGTERM || got == SIGINT || (got == SIGUSR1 && server_running(srv) == 0))
            return got;
    }
    return 0;
}

/* SIGHUP: the configuration file's governance section replaces the one in
 * force, and its tenants' keys those in force (checked as at start; a bad
 * file is logged and changes nothing). The tenants, their other settings
 * and auth.required are read at start only: a file that names other
 * tenants changes nothing, other settings are said to wait for a restart.
 * A key is rotated without one: the new key added beside the old, SIGHUP,
 * clients moved, the old removed, SIGHUP. */
static void main_reload(const struct cli *cli, const struct config *cfg, struct governor *gov,
                        struct auth *auth, const json_t *file_at_start)
{
    if (!gov || !auth || !cli->config_path)
        return;
    /* This thread takes the signals: a FIFO put in the file's place (no
     * writer) held it at the open, and a SIGTERM after went unanswered. A
     * pipe at start (--config <(...)) is read as it comes. */
    struct stat sb;
    if (stat(cli->config_path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        log_error("SIGHUP: %s is not a regular file: governance and keys not changed (SIGHUP "
                  "rereads a regular file only)", cli->config_path);
        return;
    }
    struct config *fresh = malloc(sizeof *fresh);
    struct error err = {0};
    if (!fresh) {
        log_error("SIGHUP: out of memory to reread %s", cli->config_path);
        return;
    }
    config_defaults(fresh);
    bool same = false;
    json_t *now = NULL;   /* the file as read, once: checked and compared from one copy */
    if (config_load_file_keep(fresh, cli->config_path, &now, &err) != 0) {
        log_error("SIGHUP: %s: governance and keys not changed", err.msg);
    } else if (!(same = fresh->tenants.n == cfg->tenants.n)) {
        log_error("SIGHUP: %s names other tenants than those in force: governance and keys not "
                  "changed (tenants are read at start: restart to change them)", cli->config_path);
    } else {
        for (int t = 0; t < cfg->tenants.n && same; t++)
            same = strcmp(fresh->tenants.t[t].name, cfg->tenants.t[t].name) == 0;
        if (!same)
            log_error("SIGHUP: %s names other tenants than those in force: governance and keys "
                      "not changed (tenants are read at start: restart to change them)",
                      cli->config_path);
    }
    /* The windows are checked against the tenants in force, as a PUT of
     * /v2/governance and the start check them: the file's own tenants may
     * differ (their change waits for a restart), and a share above the
     * limit in force passed against the file's raised one. */
    struct governance *g = NULL;
    if (same) {
        char where[4200];
        snprintf(where, sizeof where, "%s: governance", cli->config_path);
        if (governance_parse(json_object_get(now, "governance"), &cfg->tenants, where, &g,
                             &err) != 0) {
            log_error("SIGHUP: %s (against the tenants in force): governance and keys not "
                      "changed", err.msg);
            same = false;
        }
    }
    uint64_t rekeyed = 0;
    if (same && auth_replace_keys(auth, &fresh->tenants, &rekeyed, &err) < 0) {
        log_error("SIGHUP: %s: governance and keys not changed", err.msg);
        same = false;
        governance_free(g);
    }
    if (same) {
        governor_replace(gov, g);   /* NULL: no windows any more */
        log_info("SIGHUP: governance reread from %s", cli->config_path);
        for (int t = 0; t < cfg->tenants.n && t < 64; t++)
            if (rekeyed & (1ull << t))
                log_info("SIGHUP: tenant %s's keys replaced: %d in force", cfg->tenants.t[t].name,
                         fresh->tenants.t[t].nkeys);
        if (rekeyed && !auth_keys_exist(auth) && !cfg->tenants.auth_required)
            log_warn("SIGHUP: no tenant has keys now: every caller is tenant default, and the "
                     "admin routes answer 403 to every caller until keys are back or a restart "
                     "without keys");
        if (rekeyed)
            main_auth_warnings(cfg, auth);
        /* The same tenants with other settings: said, since nothing else
         * would tell the operator the change waits for a restart. */
        for (int t = 0; t < cfg->tenants.n; t++)
            if (!main_tenant_same(&cfg->tenants.t[t], &fresh->tenants.t[t]))
                log_warn("SIGHUP: tenant %s's settings in %s differ from those in force; "
                         "tenants are read at start: restart to apply them",
                         cfg->tenants.t[t].name, cli->config_path);
        if (fresh->tenants.auth_required != cfg->tenants.auth_required)
            log_warn("SIGHUP: auth.required in %s differs from the one in force; it is read at "
                     "start: restart to apply it", cli->config_path);
        /* Any other section changed: SIGHUP applies governance and keys only. */
        char changed[512];
        if (file_at_start) {
            main_changed_sections(file_at_start, now, changed, sizeof changed);
            if (changed[0])
                log_warn("SIGHUP: %s changed in %s; SIGHUP applies governance and keys only: "
                         "restart to apply them", changed, cli->config_path);
        }
    }
    json_decref(now);
    config_release(fresh);
    free(fresh);
}

/* The error shape a route's clients read: OpenAI's on its routes, for the
 * guard's refusals, the router's 405 and the connection's own errors too. */
static void main_style(struct http_request *req, const char *pattern, void *ctx)
{
    (void)ctx;
    size_t len;
    const char *path = http_request_path(req, &len);
    if (pattern ? api_openai_route(pattern, http_request_method(req))
                : api_openai_path(path, len))
        http_request_set_error_style(req, HTTP_ERRORS_OPENAI);
}

static int routes_build(struct router *r, const struct config *cfg, struct api_state *st,
                        struct error *err)
{
    int rc;
    if ((rc = api_health_register(r, st, err)) || (rc = api_models_register(r, st, err)) ||
        (rc = api_llm_register(r, st, err)) ||
        (rc = api_metrics_register(r, st, err)) || (rc = api_dashboard_register(r, st, err)) ||
        (rc = api_jobs_register(r, st, err)) || (rc = api_batch_register(r, st, err)) || (rc = api_governance_register(r, st, err)) ||
        (rc = api_repository_register(r, st, err)) || (rc = api_usage_register(r, st, err)) ||
        (rc = api_logging_register(r, st, err)) || (rc = api_shm_register(r, st, err)))
        return rc;
    if (cfg->debug_endpoints && (rc = api_debug_register(r, st, err)))
        return rc;
    if (st->proxy && (rc = proxy_register(st->proxy, r, err)))
        return rc;
    /* Who may call what: one check before every handler above (auth.h). */
    router_set_style(r, main_style, NULL);
    router_set_guard(r, auth_guard, st->auth);
    router_set_precheck(r, api_models_precheck, st);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t t_start = now_ns();
    const char *stopped = NULL;   /* set by a drain: how it ended, logged last */
    int64_t stop_by = 0;          /* the drain's end (now_ns); 0: no drain, no bound */
    json_t *file_at_start = NULL; /* the config file as read at start (SIGHUP compares) */
    if (argc >= 2 && strcmp(argv[1], "hash-key") == 0)
        return main_hash_key(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return report_main(argc, argv);
    struct cli cli = {0};
    int rc = cli_parse(argc, argv, &cli);
    if (rc != 0) {
        if (rc < 0)
            usage(stderr);
        return rc < 0 ? EXIT_USAGE : 0;
    }

    struct error err = {0};
    struct config cfg;
    if (config_build(&cli, &cfg, &file_at_start, &err)) {
        fprintf(stderr, "batchgate: %s\n", err.msg);
        json_decref(file_at_start);
        config_release(&cfg);
        return EXIT_USAGE;
    }
    char msg[512];
    struct log *log = log_open(cfg.log_file[0] ? cfg.log_file : NULL, cfg.log_level, msg,
                               (int)sizeof msg);
    /* Errors about a setting after the file was read name the file too
     * (SPEC.md: the file, the field, what is wrong); "" without one. */
    char from[4200];
    snprintf(from, sizeof from, "%s%s", cli.config_path ? cli.config_path : "",
             cli.config_path ? ": " : "");
    if (!log) {
        fprintf(stderr, "batchgate: %slog_file: %s\n", from, msg);
        json_decref(file_at_start);
        config_release(&cfg);
        return EXIT_USAGE;
    }
    log_set_default(log);

    /* Block our signals before any thread exists so every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (evthread_use_pthreads() != 0) {
        log_error("libevent was built without pthreads support");
        json_decref(file_at_start);
        config_release(&cfg);
        log_close(log);
        return 1;
    }

    /* The state_dir is this server's alone (state.h), before anything in it
     * (packed weights, jobs, the ledger) is touched. */
    struct state_claim state_claim, jobs_claim;
    state_claim_init(&state_claim);
    state_claim_init(&jobs_claim);
    /* The jobs folder is claimed too, the default one (<state_dir>/jobs)
     * included: a second server given it as its jobs.dir deleted the
     * first's Batch API files at its start, as a crash's leftovers. */
    char jobs_dir[4200];
    snprintf(jobs_dir, sizeof jobs_dir, "%s%s", cfg.jobs.dir[0] ? cfg.jobs.dir : cfg.state_dir,
             cfg.jobs.dir[0] ? "" : "/jobs");
    if (state_dir_claim(cfg.state_dir, "state_dir", &state_claim, &err) ||
        (!state_claim_covers(&state_claim, jobs_dir) &&
         state_dir_claim(jobs_dir, "jobs.dir", &jobs_claim, &err))) {
        log_error("%s%s", err.code == BG_EIO ? "" : from, err.msg);
        state_dir_release(&state_claim);
        config_release(&cfg);
        json_decref(file_at_start);
        log_close(log);
        return err.code == BG_EIO ? 1 : EXIT_USAGE;   /* held: like a port in use */
    }
    int exit_code = 0;
    struct api_state api = {0};
    api.start_ns = t_start;
    char nvml_msg[128];
    api.nvml = nvml_open(nvml_msg, (int)sizeof nvml_msg);
    log_debug("%s", nvml_msg);
    api.triton_names = cfg.metrics.triton_names;
    api.procstat = api.triton_names ? procstat_new() : NULL;
    struct router *router = router_new();
    struct router *h2router = NULL;   /* the gRPC port's */
    struct grpc_service *grpc = NULL;
    struct server *srv = NULL;
    struct serving *serving = NULL;
    /* The model table exists before the first request can ask for it; the
     * models load after the listener is up, so liveness answers meanwhile. */
    if (cfg.http.io_threads <= 0)   /* a container's CPU limit, not the node's size */
        cfg.http.io_threads = cpus_usable();
    /* glibc gives each thread that allocates its own malloc arena, up to 8
     * per core, each holding its own free pages. Every model adds threads
     * (workers, reaper, watchdog); the ones that allocate per request are
     * the IO threads, so two arenas per IO thread bound that without
     * contention. Set before any thread exists. */
    mallopt(M_ARENA_MAX, 2 * cfg.http.io_threads);
    /* Request bodies decode in an arena per IO thread (jscratch.h); the hook
     * is process-wide, so it goes in before any thread exists. */
    jscratch_install();
    api.jscratch = calloc((size_t)cfg.http.io_threads, sizeof *api.jscratch);
    for (int i = 0; api.jscratch && i < cfg.http.io_threads; i++)
        if ((api.jscratch[i] = jscratch_new(JSCRATCH_BLOCK)) != NULL)
            api.njscratch = i + 1;
        else
            break;   /* the rest decode with plain malloc */
    if (serving_open(cfg.model_repository, cfg.model_repository_set, cfg.http.io_threads, &serving,
                     &err)) {
        log_error("%s%s", cli.models ? "--models: " : from, err.msg);
        exit_code = EXIT_USAGE;
        goto out;
    }
    api.serving = serving;
    api.log_file = cfg.log_file;
    /* The schedulers' shares come from the same table the gateway reads;
     * with tenants, the governor puts a time window's shares in force. */
    serving_set_tenants(serving, &cfg.tenants);
    serving_set_devices(serving, cfg.devices, cfg.ndevices);
    serving_set_poll(serving, cfg.repository_poll_s);
    serving_set_removed_keep(serving, cfg.removed_metrics_keep_s);
    char packed[4200];
    snprintf(packed, sizeof packed, "%.4000s/packed", cfg.state_dir);
    serving_set_cache_dir(serving, packed);
    /* Started without tenants too: GET /v2/governance answers whatever
     * the configuration (SPEC.md), though windows then change nothing. */
    if (cfg.tenants.n <= 1 && cfg.governance && governance_window_count(cfg.governance) > 0)
        log_warn("governance: time windows set the shares of tenants and the jobs' "
                 "offline_share among them, and no tenant is configured (tenants[]): they "
                 "change nothing");
    /* Without a section: the host's zone and no windows, as a SIGHUP reads
     * the same file (GET said "localtime" at offset 0 until one did). */
    if (!cfg.governance && governance_parse(NULL, &cfg.tenants, "governance", &cfg.governance,
                                            &err) != 0) {
        log_error("%s", err.msg);
        exit_code = 2;
        goto out;
    }
    api.governor = governor_start(cfg.governance, &cfg.tenants, main_apply_shares, serving, &err);
    if (!api.governor) {
        log_error("%s", err.msg);
        exit_code = 1;
        goto out;
    }
    cfg.governance = NULL;   /* the governor's now */
    /* Tenants before any route can be called: the guard resolves them. */
    /* Room for models the repository poll or a load by name adds later;
     * past it their answers are not counted per tenant. */
    api.tenantstats = tenantstats_new(cfg.http.io_threads, cfg.tenants.n,
                                      serving_count(serving) + (cfg.repository_poll_s ? 64 : 0));
    api.auth = api.tenantstats ? auth_new(&cfg.tenants, api.tenantstats, &err) : NULL;
    api.admit = api.auth ? admit_new(&cfg.tenants, &err) : NULL;
    if (!api.admit) {
        log_error("%s", api.tenantstats ? err.msg : "out of memory for the tenants' counters");
        exit_code = 1;
        goto out;
    }
    if (cfg.tenants.n > 1 || auth_keys_exist(api.auth))
        log_info("%d tenants, %s; auth %s", cfg.tenants.n,
                 auth_keys_exist(api.auth) ? "keys configured" : "no keys",
                 cfg.tenants.auth_required ? "required" : "optional (no key: tenant default)");
    main_auth_warnings(&cfg, api.auth);
    /* The state database before any route can ask for a job. */
    struct jobs_config jc = {cfg.state_dir, cfg.jobs.dir, cfg.jobs.max_input_bytes, &cfg.tenants,
                             cfg.jobs.max_file_bytes, cfg.jobs.file_expiry_s,
                             cfg.jobs.runner_priority, cfg.jobs.retention_s};
    if (jobs_open(&jc, serving, &api.jobs, &err)) {
        log_error("%s%s", err.code == BG_ECONFIG ? from : "", err.msg);
        /* A damaged or newer database is a runtime failure, as `batchgate
         * report` says of it; a folder that cannot be one is configuration. */
        exit_code = err.code == BG_ECONFIG ? EXIT_USAGE : 1;
        goto out;
    }
    /* Long reads of that database (a year of usage) leave the IO threads. */
    if (!(api.offload = offload_start(MAIN_OFFLOAD_QUEUED, &err))) {
        log_error("%s", err.msg);
        exit_code = 1;
        goto out;
    }
    /* Before the models load (the ledger charges every counter from its
     * zero) and before any IO thread can read api.ledger (/metrics). */
    api.ledger = ledger_start(serving, jobs_state(api.jobs), &cfg.usage, main_energy, api.nvml,
                              &err);
    if (!api.ledger) {
        log_error("%s", err.msg);
        exit_code = 1;
        goto out;
    }
    main_restore_quotas(api.admit, &cfg.tenants, jobs_state(api.jobs), serving);
    /* Triton's system shared memory regions (api_shm.c): empty until a
     * client registers one. */
    api.shm = shmreg_new();
    api.shm_allow_remote = cfg.shared_memory.allow_remote;
    if (!api.shm) {
        log_error("out of memory for the shared memory registry");
        exit_code = 1;
        goto out;
    }
    api.proxy = proxy_new(&cfg.proxy, cfg.http.io_threads, &err);
    if (!api.proxy) {
        log_error("%s: %s", cli.config_path ? cli.config_path : "config", err.msg);
        exit_code = EXIT_USAGE;
        goto out;
    }
    proxy_set_auth(api.proxy, api.auth);
    if (!router || routes_build(router, &cfg, &api, &err)) {
        log_error("cannot build routes: %s", router ? err.msg : "out of memory");
        exit_code = 1;
        goto out;
    }
    /* The gRPC port: its calls become HTTP requests routed by `router`. */
    if (cfg.http.h2.listen_port >= 0) {
        h2router = router_new();
        grpc = grpc_service_new(router, cfg.http.limits.max_body_bytes);
        if (!h2router || !grpc || grpc_service_register(grpc, h2router, &err)) {
            log_error("cannot build the gRPC service: %s",
                      h2router && grpc ? err.msg : "out of memory");
            exit_code = 1;
            goto out;
        }
        cfg.http.h2.router = h2router;
        api.grpc = grpc;
        if (api.auth)
            grpc_service_set_caller_check(grpc, auth_caller_known, api.auth);
    }
    srv = server_new(&cfg.http, router, &err);
    api.server = srv;   /* before any IO thread can read it */
    if (!srv || server_start(srv, pthread_self(), &err)) {
        /* A listen setting's trouble (no address, a host that does not
         * resolve, a port held) is named with the file it came from
         * (SPEC.md: the file, the field, what is wrong), unless a flag
         * gave it. */
        bool grpc_field = strncmp(err.msg, "grpc_listen", 11) == 0;
        bool listen_field = grpc_field || strncmp(err.msg, "listen", 6) == 0;
        bool by_flag = grpc_field ? cli.grpc_listen != NULL : cli.listen != NULL;
        log_error("%s%s", listen_field && !by_flag ? from : "", err.msg);
        exit_code = err.code == BG_ECONFIG ? 2 : 1;   /* two ports that cannot both be */
        goto out;
    }
    if (proxy_start(api.proxy, server_event_base(srv, 0), &err)) {
        log_error("%s", err.msg);
        exit_code = 1;
        goto out;
    }
    log_info("listening on %s%s%s:%d (%d io threads)", strchr(cfg.http.listen_host, ':') ? "[" : "",
             cfg.http.listen_host, strchr(cfg.http.listen_host, ':') ? "]" : "", server_port(srv),
             server_threads(srv));
    if (server_h2_port(srv) >= 0)
        log_info("gRPC on %s%s%s:%d (KServe v2, HTTP/2 cleartext)",
                 strchr(cfg.http.h2.listen_host, ':') ? "[" : "", cfg.http.h2.listen_host,
                 strchr(cfg.http.h2.listen_host, ':') ? "]" : "", server_h2_port(srv));
    if (serving_start(serving, &err))
        log_error("%s: models stay as they are (no load, unload or eviction)", err.msg);
    /* The eager loads run on the lifecycle thread: a SIGTERM meanwhile is
     * taken now (a pod loading large models ignored its stop until
     * Kubernetes killed it), and a load that never ends cannot hold it. */
    int sig = main_wait_started(serving, &sigs, srv, log, &cli, &cfg, api.governor, api.auth,
                                file_at_start);
    if (sig) {
        log_info("SIG%s during the start: the model loads not begun are given up",
                 sigabbrev_np(sig));
    } else if (jobs_start(api.jobs, &err)) {   /* unfinished jobs resume once their models are loaded */
        log_error("%s", err.msg);
        exit_code = 1;
        goto out;
    } else {
        atomic_store(&api.ready_ns, now_ns());
        atomic_store(&api.ready, true);
        log_info("ready in %.1f ms%s", (double)(now_ns() - t_start) / 1e6,
                 serving_all_ready(serving, NULL, 0) ? ""
                                                     : " (some models failed to load: see above)");
    }

    /* Serve until SIGTERM/SIGINT (or every IO thread died). */
    while (!sig) {
        siginfo_t si;
        /* Every 10 s without a signal: give the heap's free pages back to
         * the kernel. Requests allocate and free on several threads' arenas,
         * and without this RSS creeps up with fragmentation (scripts/soak
         * saw +5% in 10 minutes with the memory in use flat). */
        struct timespec tick = {MAIN_TRIM_INTERVAL_S, 0};
        int got = sigtimedwait(&sigs, &si, &tick);
        if (got < 0) {
            if (errno == EAGAIN)
                malloc_trim(0);
            continue;
        }
        if (got == SIGHUP) {
            main_reopen_log(log, &cfg);
            main_reload(&cli, &cfg, api.governor, api.auth, file_at_start);
            continue;
        }
        if (got == SIGUSR1 && server_running(srv) > 0)
            continue;
        sig = got;
    }

    if (sig == SIGUSR1) {
        log_error("IO threads exited unexpectedly");
        exit_code = 1;
        stop_by = now_ns() + (int64_t)cfg.shutdown_timeout_ms * 1000000;
    } else {
        /* Drain: stop accepting, answer what was accepted, bounded in time. */
        log_info("SIG%s: draining (up to %d ms)", sigabbrev_np(sig), cfg.shutdown_timeout_ms);
        atomic_store(&api.draining, true);
        serving_begin_stop(serving);
        server_drain(srv);
        stop_by = now_ns() + (int64_t)cfg.shutdown_timeout_ms * 1000000;
        bool forced = false;
        while (server_running(srv) > 0 && !forced) {
            int64_t left = stop_by - now_ns();
            siginfo_t si;
            struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
            int s2 = left > 0 ? sigtimedwait(&sigs, &si, &ts) : -1;
            if (left <= 0)
                log_warn("drain timed out after %d ms; closing the remaining connections",
                         cfg.shutdown_timeout_ms);
            else if (s2 == SIGTERM || s2 == SIGINT)
                log_warn("SIG%s again: closing the remaining connections now", sigabbrev_np(s2));
            else if (s2 == SIGHUP)
                main_reopen_log(log, &cfg);
            if (left <= 0 || s2 == SIGTERM || s2 == SIGINT) {
                /* Queued requests get 503 while their connections still
                 * exist; a load under way is not waited for (a second
                 * signal waited for it to end, a hung one for ever). */
                main_stop_work(&api, serving, now_ns() + MAIN_STOP_GRACE_NS);
                server_force_close(srv);
                forced = true;
            }
        }
        uint64_t abandoned = server_join(srv);
        if (abandoned > 0) {
            log_error("shutdown: %llu accepted requests were not answered whole (no answer, "
                      "or a stream cut short)", (unsigned long long)abandoned);
            exit_code = 1;
        }
        stopped = forced ? " (forced)" : "";
        if (forced)
            stop_by = now_ns();
    }

out:;
    /* A model load still running is waited for within the drain's time
     * (and a moment more: an idle thread's own exit), or until a second
     * stop signal (main_wait_loads). */
    int64_t until = stop_by ? (stop_by > now_ns() ? stop_by : now_ns()) + MAIN_STOP_GRACE_NS : 0;
    if (until && serving)
        until = main_wait_loads(serving, &sigs, until, log, &cfg);
    bool serving_done = main_stop_work(&api, serving, until);
    /* Its last sample sees every batch that ran; it writes before the
     * database closes (jobs_free). */
    ledger_stop(api.ledger);
    api.ledger = NULL;
    if (srv) {
        server_force_close(srv);
        server_join(srv);
    }
    if (!serving_done) {
        /* The lifecycle thread is in a load that did not end (its waiters
         * were answered): what it uses cannot be freed under it, and
         * nothing else needs to be (the ledger and the jobs wrote their
         * last, the state database is consistent at every commit). */
        log_warn("a model load is still running after the drain: exiting without it");
        if (stopped)
            log_info("stopped%s after %.1f s of service", stopped,
                     (double)(now_ns() - t_start) / 1e9);
        _exit(exit_code);
    }
    /* Its connections live on the IO threads' event bases: before those go. */
    proxy_free(api.proxy);
    server_free(srv);
    offload_free(api.offload);
    /* After the IO threads: no request holds a region any more, and every
     * region still registered is unmapped here. */
    shmreg_free(api.shm);
    for (int i = 0; i < api.njscratch; i++)
        jscratch_free(api.jscratch[i]);
    free(api.jscratch);
    jobs_free(api.jobs);
    governor_stop(api.governor);   /* it applies shares to the serving table */
    serving_free(serving);
    config_release(&cfg);
    admit_free(api.admit);
    auth_free(api.auth);
    tenantstats_free(api.tenantstats);
    nvml_close(api.nvml);
    procstat_free(api.procstat);
    router_free(router);
    router_free(h2router);
    grpc_service_free(grpc);
    /* After jobs_free and serving_free: nothing writes there now. */
    state_dir_release(&state_claim);
    state_dir_release(&jobs_claim);
    /* Last: a supervisor that restarts on this line finds the state_dir free
     * (the jobs runner may finish an offline batch after the drain). */
    if (stopped)
        log_info("stopped%s after %.1f s of service", stopped, (double)(now_ns() - t_start) / 1e9);
    json_decref(file_at_start);
    log_close(log);
    libevent_global_shutdown();
    return exit_code;
}
