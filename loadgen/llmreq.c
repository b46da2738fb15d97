/* llmreq.c - see llmreq.h. */
#include "loadgen/llmreq.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

struct llmreq {
    struct llmreq_opts o;
    char path[2100];
    struct buf head;             /* request line and headers, without Content-Length */
    /* --prompts: the bodies, one per line of the file */
    char **bodies;
    size_t nbodies;
    /* --synthetic */
    bool synthetic;
    struct llmreq_synth s;
    char **prefixes;             /* s.prefixes texts */
    uint64_t next;               /* requests made so far in the run */
};

/* Words of the synthetic texts: common English words, so that a real
 * tokenizer cuts them as it cuts prose (these are about one BPE token
 * each; 5.3 bytes with the space, 1.3 of llmsim's 4-byte tokens). */
static const char *const llmreq_words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
    "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
    "time", "people", "year", "way", "day", "man", "thing", "woman", "life", "child",
    "world", "school", "state", "family", "student", "group", "country", "problem", "hand",
    "part", "place", "case", "week", "company", "system", "program", "question", "work",
    "government", "number", "night", "point", "home", "water", "room", "mother", "area",
    "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word",
    "business", "issue", "side", "kind", "head", "house", "service", "friend", "father",
    "power", "hour", "game", "line", "end", "member", "law", "car", "city", "community",
    "name", "president", "team", "minute", "idea", "kid", "body", "information", "back",
    "parent", "face", "others", "level", "office", "door", "health", "person", "art", "war",
};
#define LLMREQ_NWORDS (sizeof llmreq_words / sizeof llmreq_words[0])

/* splitmix64: request k's and prefix j's draws are functions of (seed, k). */
static uint64_t llmreq_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t llmreq_rnd(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    return llmreq_mix(*s);
}

static double llmreq_uniform(uint64_t *s)
{
    return ((double)(llmreq_rnd(s) >> 11) + 0.5) / 9007199254740992.0;
}

/* normal(mean, sd), rounded, clipped to 1..LLMREQ_WORDS_MAX (Box-Muller). */
static int llmreq_draw(uint64_t *s, const struct llmreq_len *l)
{
    double u1 = llmreq_uniform(s), u2 = llmreq_uniform(s);
    double x = l->mean + l->sd * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
    if (!(x >= 1))
        return 1;
    return x > LLMREQ_WORDS_MAX ? LLMREQ_WORDS_MAX : (int)lround(x);
}

static int llmreq_text(struct buf *b, uint64_t *s, int words)
{
    for (int i = 0; i < words; i++) {
        const char *w = llmreq_words[llmreq_rnd(s) % LLMREQ_NWORDS];
        if ((i && buf_append(b, " ", 1) < 0) || buf_append(b, w, strlen(w)) < 0)
            return -1;
    }
    return buf_append(b, "", 1);   /* NUL-terminated; len counts it */
}

/* ---- the synthetic spec ---- */

static int llmreq_len_parse(const char *v, struct llmreq_len *l)
{
    char *end;
    l->mean = strtod(v, &end);
    l->sd = 0;
    if (end == v || !(l->mean >= 1) || l->mean > LLMREQ_WORDS_MAX)
        return -1;
    if (*end == ':') {
        const char *sd = end + 1;
        l->sd = strtod(sd, &end);
        if (end == sd || !(l->sd >= 0) || l->sd > LLMREQ_WORDS_MAX)
            return -1;
    }
    return *end ? -1 : 0;
}

static int llmreq_int_parse(const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

int llmreq_synth_parse(const char *spec, struct llmreq_synth *s, char *msg, int cap)
{
    memset(s, 0, sizeof *s);
    s->in.mean = 200;
    s->prefix_len = 512;
    char *copy = strdup(spec), *save = NULL;
    if (!copy) {
        snprintf(msg, (size_t)cap, "out of memory");
        return -1;
    }
    int rc = 0;
    bool len_set = false;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(msg, (size_t)cap, "--synthetic: \"%.40s\" is not NAME=VALUE", tok);
            rc = -1;
            break;
        }
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        if (strcmp(k, "in") == 0 || strcmp(k, "out") == 0) {
            bool in = k[0] == 'i';
            if (llmreq_len_parse(v, in ? &s->in : &s->out) < 0) {
                snprintf(msg, (size_t)cap, "--synthetic: %s: MEAN[:SD] with 1 <= MEAN <= %d and "
                         "SD >= 0, got \"%.20s\"", k, LLMREQ_WORDS_MAX, v);
                rc = -1;
            }
            if (!in)
                s->out_set = true;
        } else if (strcmp(k, "prefixes") == 0) {
            if (llmreq_int_parse(v, 0, LLMREQ_PREFIXES_MAX, &s->prefixes) < 0) {
                snprintf(msg, (size_t)cap, "--synthetic: prefixes: a whole number from 0 to %d, "
                         "got \"%.20s\"", LLMREQ_PREFIXES_MAX, v);
                rc = -1;
            }
        } else if (strcmp(k, "prefix_len") == 0) {
            len_set = true;
            if (llmreq_int_parse(v, 1, LLMREQ_WORDS_MAX, &s->prefix_len) < 0) {
                snprintf(msg, (size_t)cap, "--synthetic: prefix_len: words from 1 to %d, got "
                         "\"%.20s\"", LLMREQ_WORDS_MAX, v);
                rc = -1;
            }
        } else {
            snprintf(msg, (size_t)cap, "--synthetic: unknown \"%.40s\" (known: in, out, prefixes, "
                     "prefix_len)", k);
            rc = -1;
        }
    }
    free(copy);
    if (rc == 0 && len_set && s->prefixes == 0) {
        snprintf(msg, (size_t)cap, "--synthetic: prefix_len without prefixes=K");
        rc = -1;
    }
    return rc;
}

/* ---- building ---- */

static int llmreq_new(const struct llmreq_opts *o, struct llmreq **out, char *msg, int cap)
{
    struct llmreq *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(msg, (size_t)cap, "out of memory");
        return -1;
    }
    w->o = *o;
    const char *route = o->chat ? "/v1/chat/completions" : "/v1/completions";
    const char *p = o->url_path ? o->url_path : "/";
    size_t pl = strlen(p), rl = strlen(route);
    /* The URL names the route itself, or a prefix the routes sit under. */
    if ((pl >= 20 && strcmp(p + pl - 20, "/v1/chat/completions") == 0) ||
        (pl >= 15 && strcmp(p + pl - 15, "/v1/completions") == 0)) {
        snprintf(w->path, sizeof w->path, "%s", p);
    } else {
        while (pl > 0 && p[pl - 1] == '/')
            pl--;
        if (pl + rl >= sizeof w->path) {
            snprintf(msg, (size_t)cap, "--url: the path is too long");
            free(w);
            return -1;
        }
        memcpy(w->path, p, pl);
        memcpy(w->path + pl, route, rl + 1);
    }
    buf_appendf(&w->head, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n",
                w->path, o->host);
    if (o->headers)
        buf_appendf(&w->head, "%s", o->headers);
    if (o->api_key)
        buf_appendf(&w->head, "Authorization: Bearer %s\r\n", o->api_key);
    if (!w->head.data) {
        snprintf(msg, (size_t)cap, "out of memory");
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

/* The fields every request carries, set over what the line or the
 * generator gave: model, max_tokens (unless given), stream and, for a
 * stream, stream_options.include_usage (the token counts). */
static char *llmreq_finish(const struct llmreq *w, json_t *body, int max_tokens)
{
    json_object_set_new(body, "model", json_string(w->o.model));
    if (!json_object_get(body, "max_tokens"))
        json_object_set_new(body, "max_tokens", json_integer(max_tokens));
    json_object_set_new(body, "stream", json_boolean(w->o.stream));
    if (w->o.stream)
        json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    else
        json_object_del(body, "stream_options");
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return s;
}

int llmreq_from_prompts(const struct llmreq_opts *o, const char *path, struct llmreq **out,
                        char *msg, int cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, (size_t)cap, "--prompts %s: %s", path, strerror(errno));
        return -1;
    }
    struct llmreq *w;
    if (llmreq_new(o, &w, msg, cap) < 0) {
        fclose(f);
        return -1;
    }
    char *line = NULL;
    size_t lcap = 0, capb = 0;
    ssize_t n;
    int rc = 0;
    for (long lineno = 1; rc == 0 && (n = getline(&line, &lcap, f)) > 0; lineno++) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            n--;
        if (n == 0)
            continue;
        json_error_t je;
        json_t *obj = json_loadb(line, (size_t)n, 0, &je);
        json_t *prompt = json_object_get(obj, "prompt"), *msgs = json_object_get(obj, "messages");
        json_t *mt = json_object_get(obj, "max_tokens");
        const char *bad = NULL;
        if (!json_is_object(obj))
            bad = "not a JSON object";
        else if (!json_is_string(prompt) && !(json_is_array(msgs) && json_array_size(msgs) > 0))
            bad = "neither \"prompt\" (a string) nor \"messages\" (a non-empty array)";
        else if (json_is_string(prompt) && msgs)
            bad = "both \"prompt\" and \"messages\"";
        else if (!o->chat && !json_is_string(prompt))
            bad = "\"messages\": --openai completions sends a \"prompt\"";
        else if (mt && !(json_is_integer(mt) && json_integer_value(mt) >= 1))
            bad = "\"max_tokens\" is not a whole number >= 1";
        if (bad) {
            snprintf(msg, (size_t)cap, "--prompts %s: line %ld: %s", path, lineno, bad);
            json_decref(obj);
            rc = -1;
            break;
        }
        if (o->chat && json_is_string(prompt)) {
            json_object_set_new(obj, "messages",
                                json_pack("[{s:s,s:O}]", "role", "user", "content", prompt));
            json_object_del(obj, "prompt");
        }
        char *body = llmreq_finish(w, obj, o->max_tokens);
        if (w->nbodies == capb) {
            size_t nc = capb ? capb * 2 : 64;
            char **b = realloc(w->bodies, nc * sizeof *b);
            if (!b) {
                free(body);
                body = NULL;
            } else {
                w->bodies = b;
                capb = nc;
            }
        }
        if (!body) {
            snprintf(msg, (size_t)cap, "out of memory");
            rc = -1;
            break;
        }
        w->bodies[w->nbodies++] = body;
    }
    free(line);
    fclose(f);
    if (rc == 0 && w->nbodies == 0) {
        snprintf(msg, (size_t)cap, "--prompts %s: no lines", path);
        rc = -1;
    }
    if (rc < 0) {
        llmreq_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

int llmreq_from_synth(const struct llmreq_opts *o, const struct llmreq_synth *s,
                      struct llmreq **out, char *msg, int cap)
{
    struct llmreq *w;
    if (llmreq_new(o, &w, msg, cap) < 0)
        return -1;
    w->synthetic = true;
    w->s = *s;
    if (!w->s.out_set)
        w->s.out = (struct llmreq_len){o->max_tokens, 0};
    if (s->prefixes > 0) {
        w->prefixes = calloc((size_t)s->prefixes, sizeof *w->prefixes);
        for (int j = 0; w->prefixes && j < s->prefixes; j++) {
            /* Prefix j depends on the seed and j only. */
            uint64_t st = llmreq_mix(llmreq_mix(o->seed) ^ llmreq_mix(0x70726566ULL + (uint64_t)j));
            struct buf b = BUF_INIT;
            if (llmreq_text(&b, &st, s->prefix_len) < 0) {
                buf_free(&b);
                break;
            }
            w->prefixes[j] = b.data;
        }
        for (int j = 0; j < s->prefixes; j++)
            if (!w->prefixes || !w->prefixes[j]) {
                snprintf(msg, (size_t)cap, "out of memory");
                llmreq_free(w);
                return -1;
            }
    }
    *out = w;
    return 0;
}

void llmreq_free(struct llmreq *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nbodies; i++)
        free(w->bodies[i]);
    free(w->bodies);
    if (w->prefixes)
        for (int j = 0; j < w->s.prefixes; j++)
            free(w->prefixes[j]);
    free(w->prefixes);
    buf_free(&w->head);
    free(w);
}

bool llmreq_stream(const struct llmreq *w) { return w->o.stream; }

const char *llmreq_path(const struct llmreq *w) { return w->path; }

/* Synthetic request k: its own draws, from (seed, k) alone. The prefix is
 * the system message (chat) or the prompt's first paragraph (completions),
 * so equal prefixes are equal leading bytes of the rendered prompt. */
static char *llmreq_synth_body(const struct llmreq *w, uint64_t k)
{
    uint64_t st = llmreq_mix(llmreq_mix(w->o.seed) ^ llmreq_mix(k));
    const char *prefix = NULL;
    if (w->s.prefixes > 0)
        prefix = w->prefixes[llmreq_rnd(&st) % (uint64_t)w->s.prefixes];
    int in = llmreq_draw(&st, &w->s.in), max_tokens = llmreq_draw(&st, &w->s.out);
    struct buf text = BUF_INIT;
    if (!w->o.chat && prefix) {
        buf_append(&text, prefix, strlen(prefix));
        buf_append(&text, "\n\n", 2);
    }
    if (llmreq_text(&text, &st, in) < 0) {
        buf_free(&text);
        return NULL;
    }
    json_t *body;
    if (!w->o.chat)
        body = json_pack("{s:s}", "prompt", text.data);
    else if (prefix)
        body = json_pack("{s:[{s:s,s:s},{s:s,s:s}]}", "messages", "role", "system", "content",
                         prefix, "role", "user", "content", text.data);
    else
        body = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", text.data);
    buf_free(&text);
    return body ? llmreq_finish(w, body, max_tokens) : NULL;
}

char *llmreq_body(const struct llmreq *w, uint64_t k)
{
    if (w->synthetic)
        return llmreq_synth_body(w, k);
    return strdup(w->bodies[k % w->nbodies]);
}

int llmreq_append_next(struct llmreq *w, struct buf *out)
{
    const char *body;
    char *owned = NULL;
    uint64_t k = w->next++;
    if (w->synthetic)
        body = owned = llmreq_synth_body(w, k);
    else
        body = w->bodies[k % w->nbodies];
    if (!body)
        return -1;
    size_t len = strlen(body);
    int rc = 0;
    if (buf_append(out, w->head.data, w->head.len) < 0 ||
        buf_appendf(out, "Content-Length: %zu\r\n\r\n", len) < 0 || buf_append(out, body, len) < 0)
        rc = -1;
    free(owned);
    return rc;
}
