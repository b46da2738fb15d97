/* report.c - see report.h. */
#include "loadgen/report.h"

#include <math.h>
#include <string.h>

static double report_us(const struct lg_result *r, double q) { return (double)hist_quantile(&r->latency, q) / 1e3; }

static double report_ms(const struct hist *h, double q) { return (double)hist_quantile(h, q) / 1e6; }

/* Answers (or their tokens) per second: over the window and the wait for
 * its last answers, as throughput and goodput (engine.h, span_s). */
static double report_per_s(const struct lg_result *r, double n)
{
    return r->span_s > 0 ? n / r->span_s : 0;
}

static uint64_t report_non2xx(const struct lg_result *r)
{
    uint64_t n = 0;
    for (int c = 0; c < 600; c++)
        if (c < 200 || c >= 300)
            n += r->codes[c];
    return n;
}

void report_table_header(FILE *out, bool open_loop, bool named)
{
    if (named)
        fprintf(out, "%-16s ", "workload");
    fprintf(out, "%-10s %10s %10s %10s %9s %9s %9s %9s %9s %7s %6s  %s\n",
            named ? "target" : open_loop ? "rate/s" : "conns", "sent/s", "answers/s", "goodput/s",
            "p50 ms",
            "p90 ms", "p99 ms", "p99.9 ms", "max ms", "non-2xx", "errors", "server (queue, compute/batch, rows/batch)");
}

void report_table_row(FILE *out, const struct report_step *s)
{
    const struct lg_result *r = &s->r;
    uint64_t non2xx = report_non2xx(r);
    char server[96] = "";
    if (s->server)
        snprintf(server, sizeof server, "%.2f ms, %.2f ms, %.1f", s->server_queue_ms,
                 s->server_compute_ms, s->server_batch);
    /* Workloads mix the two kinds: each names its own. */
    char target[32];
    if (s->name[0])
        snprintf(target, sizeof target, s->mixed ? "%g" : s->open_loop ? "%g/s" : "%g conns",
                 s->target);
    else
        snprintf(target, sizeof target, "%g", s->target);
    if (s->name[0])
        fprintf(out, "%-16s ", s->name);
    fprintf(out, "%-10s %10.1f %10.1f %10.1f %9.2f %9.2f %9.2f %9.2f %9.2f %7llu %6llu  %s\n",
            target, r->achieved_rate, r->throughput, r->goodput, report_us(r, .5) / 1e3,
            report_us(r, .9) / 1e3, report_us(r, .99) / 1e3, report_us(r, .999) / 1e3, report_us(r, 1) / 1e3,
            (unsigned long long)non2xx, (unsigned long long)r->errors, server);
    fflush(out);
}

void report_llm_table_header(FILE *out, bool open_loop)
{
    fprintf(out, "%-10s %8s %8s %10s %9s %9s %9s %9s %9s %9s %9s %7s %6s\n",
            open_loop ? "rate/s" : "conns", "sent/s", "req/s", "out tok/s", "ttft p50", "ttft p99",
            "itl p50", "itl p99", "tpot p50", "e2e p50", "e2e p99", "non-2xx", "errors");
    fprintf(out, "%-10s %8s %8s %10s %9s %9s %9s %9s %9s %9s %9s\n", "", "", "", "", "ms", "ms",
            "ms", "ms", "ms", "ms", "ms");
}

void report_llm_table_row(FILE *out, const struct report_step *s)
{
    const struct lg_result *r = &s->r;
    const struct llmans_stats *l = &r->llm;
    fprintf(out, "%-10g %8.2f %8.2f %10.1f %9.1f %9.1f %9.2f %9.2f %9.2f %9.1f %9.1f %7llu %6llu\n",
            s->target, r->achieved_rate, report_per_s(r, (double)l->requests),
            report_per_s(r, (double)l->output_tokens), report_ms(&l->ttft, .5), report_ms(&l->ttft, .99),
            report_ms(&l->itl, .5), report_ms(&l->itl, .99), report_ms(&l->tpot, .5),
            report_ms(&l->e2e, .5), report_ms(&l->e2e, .99),
            (unsigned long long)report_non2xx(r), (unsigned long long)r->errors);
    fflush(out);
}

void report_warn_broken(const struct report_step *st)
{
    if (st->llm && st->r.llm.broken)
        fprintf(stderr, "batchgate-load: %llu answers broke (counted as errors); the first: %s\n",
                (unsigned long long)st->r.llm.broken, st->r.llm.first_broken);
}

static const char *report_mode(const struct report_step *s)
{
    return s->mixed ? "mixed" : s->open_loop ? "rate" : "concurrency";
}

/* One step's members (no braces): SPEC.md's shape and ours. */
static void report_json_fields(FILE *f, const struct report_step *s, const char *ind)
{
    const struct lg_result *r = &s->r;
    if (s->name[0])
        fprintf(f, "\"name\": \"%s\", ", s->name);
    fprintf(f, "\"mode\": \"%s\", \"target\": %g, \"achieved_rate\": %.3f, "
               "\"throughput\": %.3f, \"goodput\": %.3f, \"duration_s\": %g, \"span_s\": %.6f,\n"
               "%s\"latency_us\": {\"p50\": %.0f, \"p90\": %.0f, \"p99\": %.0f, "
               "\"p999\": %.0f, \"max\": %.0f, \"mean\": %.0f},\n%s\"codes\": {",
            report_mode(s), s->target, r->achieved_rate, r->throughput, r->goodput,
            r->duration_s, r->span_s, ind, report_us(r, .5), report_us(r, .9), report_us(r, .99),
            report_us(r, .999), report_us(r, 1), hist_mean(&r->latency) / 1e3, ind);
    int first = 1;
    for (int c = 0; c < 600; c++)
        if (r->codes[c]) {
            fprintf(f, "%s\"%d\": %llu", first ? "" : ", ", c, (unsigned long long)r->codes[c]);
            first = 0;
        }
    fprintf(f, "}, \"errors\": %llu, \"refused\": %llu, \"lost\": %llu, "
               "\"closed_idle\": %llu, \"unsent\": %llu, \"late_sends\": %llu",
            (unsigned long long)r->errors, (unsigned long long)r->refused,
            (unsigned long long)r->lost, (unsigned long long)r->closed_idle,
            (unsigned long long)r->unsent, (unsigned long long)r->late_sends);
    if (s->server)
        fprintf(f, ",\n%s\"server\": {\"queue_ms\": %.3f, \"compute_ms_per_batch\": %.3f, "
                   "\"rows_per_batch\": %.2f}", ind, s->server_queue_ms, s->server_compute_ms,
                s->server_batch);
    if (s->llm) {
        const struct llmans_stats *l = &r->llm;
        static const char *const names[] = {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"};
        const struct hist *h[] = {&l->ttft, &l->itl, &l->tpot, &l->e2e};
        fprintf(f, ",\n%s\"llm\": {", ind);
        for (int i = 0; i < 4; i++)
            fprintf(f, "\"%s\": {\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"mean\": %.3f},\n"
                       "%s        ", names[i], report_ms(h[i], .5), report_ms(h[i], .9),
                    report_ms(h[i], .99), hist_mean(h[i]) / 1e6, ind);
        fprintf(f, "\"output_tokens_per_s\": %.3f, \"prompt_tokens\": %llu, "
                   "\"output_tokens\": %llu, \"requests\": %llu, \"broken\": %llu}",
                report_per_s(r, (double)l->output_tokens), (unsigned long long)l->prompt_tokens,
                (unsigned long long)l->output_tokens, (unsigned long long)l->requests,
                (unsigned long long)l->broken);
    }
}

void report_warn_late(const struct report_step *st, double rate)
{
    /* Whatever the achieved rate says: with --constant it is the asked one
     * by construction, and the late sends are what tells. More than 1 % of
     * the sends, and more than one: one late send is a scheduler's hiccup,
     * and sent / 100 was 0 below 100 sends, where one was a warning. */
    if (st->open_loop && st->r.late_sends > 1 && st->r.late_sends * 100 > st->r.sent)
        fprintf(stderr, "batchgate-load: warning: the generator could not keep up with %.0f/s "
                        "(%llu sends late with a connection free); its latencies include its "
                        "own delay\n", rate, (unsigned long long)st->r.late_sends);
}

int report_json(const char *path, const struct report_step *s, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"steps\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n  {", i ? "," : "");
        report_json_fields(f, &s[i], "   ");
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int report_json_workloads(const char *path, const struct report_step *total,
                          const struct report_step *w, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"steps\": [\n  {");
    report_json_fields(f, total, "   ");
    fprintf(f, ",\n   \"workloads\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n    {", i ? "," : "");
        report_json_fields(f, &w[i], "     ");
        fprintf(f, "}");
    }
    fprintf(f, "]}\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int report_csv(const char *path, const struct report_step *s, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool named = n > 0 && s[0].name[0];
    if (named)
        fprintf(f, "workload,");
    bool llm = n > 0 && s[0].llm;
    fprintf(f, "mode,target,achieved_rate,throughput,goodput,p50_us,p90_us,p99_us,p999_us,max_us,"
               "errors,server_queue_ms,server_compute_ms,server_rows_per_batch,sent,answered,"
               "refused,lost,closed_idle,unsent,late_sends,codes%s\n",
            llm ? ",ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,ttft_mean_ms,itl_p50_ms,itl_p90_ms,"
                  "itl_p99_ms,itl_mean_ms,tpot_p50_ms,tpot_p90_ms,tpot_p99_ms,tpot_mean_ms,"
                  "e2e_p50_ms,e2e_p90_ms,e2e_p99_ms,e2e_mean_ms,output_tokens_per_s,"
                  "prompt_tokens,output_tokens,llm_requests,llm_broken" : "");
    for (int i = 0; i < n; i++) {
        const struct lg_result *r = &s[i].r;
        if (named)
            fprintf(f, "%s,", s[i].name);
        fprintf(f, "%s,%g,%.3f,%.3f,%.3f,%.0f,%.0f,%.0f,%.0f,%.0f,%llu,",
                report_mode(&s[i]), s[i].target, r->achieved_rate,
                r->throughput, r->goodput, report_us(r, .5), report_us(r, .9), report_us(r, .99), report_us(r, .999),
                report_us(r, 1), (unsigned long long)r->errors);
        if (s[i].server)
            fprintf(f, "%.3f,%.3f,%.2f", s[i].server_queue_ms, s[i].server_compute_ms,
                    s[i].server_batch);
        else
            fprintf(f, ",,");
        fprintf(f, ",%llu,%llu,%llu,%llu,%llu,%llu,%llu,", (unsigned long long)r->sent,
                (unsigned long long)r->answered, (unsigned long long)r->refused,
                (unsigned long long)r->lost, (unsigned long long)r->closed_idle,
                (unsigned long long)r->unsent, (unsigned long long)r->late_sends);
        /* One cell: "200:95 429:5", as the JSON's codes object. */
        int first = 1;
        for (int c = 0; c < 600; c++)
            if (r->codes[c]) {
                fprintf(f, "%s%d:%llu", first ? "" : " ", c, (unsigned long long)r->codes[c]);
                first = 0;
            }
        if (llm) {
            const struct llmans_stats *l = &r->llm;
            const struct hist *h[] = {&l->ttft, &l->itl, &l->tpot, &l->e2e};
            for (int k = 0; k < 4; k++)
                fprintf(f, ",%.3f,%.3f,%.3f,%.3f", report_ms(h[k], .5), report_ms(h[k], .9),
                        report_ms(h[k], .99), hist_mean(h[k]) / 1e6);
            fprintf(f, ",%.3f,%llu,%llu,%llu,%llu", report_per_s(r, (double)l->output_tokens),
                    (unsigned long long)l->prompt_tokens, (unsigned long long)l->output_tokens,
                    (unsigned long long)l->requests, (unsigned long long)l->broken);
        }
        fprintf(f, "\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* A 1-2-5 step for axis ticks. */
static double report_nice_step(double range)
{
    double raw = range / 5, mag = pow(10, floor(log10(raw > 0 ? raw : 1)));
    double n = raw / mag;
    return (n < 1.5 ? 1 : n < 3.5 ? 2 : n < 7.5 ? 5 : 10) * mag;
}

/* A point of the chart: latency against throughput, or (OpenAI mode) time
 * to first token against the asked rate, where the server's queueing shows
 * as the rate nears what it can take. */
static double report_svg_x(const struct report_step *s)
{
    return s->llm ? s->target : s->r.throughput;
}

static double report_svg_y(const struct report_step *s, double q)
{
    return s->llm ? report_ms(&s->r.llm.ttft, q) : report_us(&s->r, q) / 1e3;
}

int report_svg(const char *path, const struct report_step *s, int n, const char *title)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool llm = n > 0 && s[0].llm;
    const double W = 720, H = 440, L = 70, R = 20, T = 40, B = 50;
    double xmax = 1, ymax = 1;
    for (int i = 0; i < n; i++) {
        if (report_svg_x(&s[i]) > xmax)
            xmax = report_svg_x(&s[i]);
        if (report_svg_y(&s[i], .99) > ymax)
            ymax = report_svg_y(&s[i], .99);
    }
    double xs = report_nice_step(xmax), ys = report_nice_step(ymax);
    xmax = ceil(xmax / xs) * xs;
    ymax = ceil(ymax / ys) * ys;
#define X(v) (L + (W - L - R) * (v) / xmax)
#define Y(v) (H - B - (H - T - B) * (v) / ymax)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
               "fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s: ",
            W, H, L, llm ? "time to first token" : "latency vs throughput");
    for (const char *p = title; *p; p++)
        fputs(*p == '<' ? "&lt;" : *p == '&' ? "&amp;" : (char[2]){*p, 0}, f);
    fprintf(f, "</text>\n");
    for (double v = 0; v <= xmax + 1e-9; v += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                X(v), T, X(v), H - B, X(v), H - B + 16, v);
    for (double v = 0; v <= ymax + 1e-9; v += ys)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, Y(v), W - R, Y(v), L - 6, Y(v) + 4, v);
    const char *xlabel = !llm ? "throughput (answers/s)"
                         : s[0].open_loop ? "asked rate (requests/s)" : "concurrency";
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n"
               "<text transform=\"translate(16 %.0f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
            (L + W - R) / 2, H - 12, xlabel, (T + H - B) / 2,
            llm ? "time to first token (ms)" : "latency (ms)");
    static const struct {
        double q;
        const char *name, *color;
    } lines[] = {{.5, "p50", "#1f6feb"}, {.99, "p99", "#cf222e"}};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", lines[k].color);
        for (int i = 0; i < n; i++)
            fprintf(f, "%.1f,%.1f ", X(report_svg_x(&s[i])), Y(report_svg_y(&s[i], lines[k].q)));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %g: %.0f/s, "
                       "%.2f ms</title></circle>\n", X(report_svg_x(&s[i])),
                    Y(report_svg_y(&s[i], lines[k].q)), lines[k].color,
                    s[i].open_loop ? "rate" : "conns", s[i].target,
                    llm ? report_per_s(&s[i].r, (double)s[i].r.llm.requests) : s[i].r.throughput,
                    report_svg_y(&s[i], lines[k].q));
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n", W - R - 40,
                T + 16 + 16 * k, lines[k].color, lines[k].name);
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    return fclose(f) == 0 ? 0 : -1;
}
